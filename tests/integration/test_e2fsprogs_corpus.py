"""The image pre-rollout check on e2fsprogs' own test corpus: the filesystem images (most of them
damaged on purpose) that e2fsprogs' e2fsck is tested against. Each runs through the real
ext4_image_facts module (tests/image_module.py), the report step's reader and rules, and the gate's
verdict; a few also through playbooks/ami_precheck.yml.

What must hold for every image: the module answers (no traceback) within its time (no hang), never
writes the image, and the verdict is not pass; and every image that e2fsck -fn (run here, on its
own) calls damaged is failed for that reason, by IMAGE_FS_NOT_CLEAN, or is not audited at all
(verdict incomplete): not merely because a corpus image has no kernel (IMAGE_NO_KERNEL).

The whole corpus (230 images, `make e2fsprogs-corpus E2FSPROGS_GIT=<git dir of tytso/e2fsprogs>`,
or EXT4AUDIT_E2FSPROGS_TESTS=<its tests folder>) is skipped only when it is absent; six of its
images are kept in tests/fixtures/e2fsprogs (README there) so that CI always runs some."""

import bz2
import concurrent.futures
import datetime
import gzip
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, ROOT, ansible_playbook, load_json
from ext4audit.report import reports
from ext4audit.steps import fleet
from ext4audit.rules import catalog as catalog_mod

E2FSCK = "/usr/sbin/e2fsck"
pytestmark = pytest.mark.skipif(not os.path.exists(E2FSCK), reason="needs e2fsprogs")

CORPUS = os.environ.get("EXT4AUDIT_E2FSPROGS_TESTS") or os.path.join(ROOT, ".cache", "e2fsprogs", "tests")
KEPT = os.path.join(FIXTURES, "e2fsprogs")
# e2fsck -fn 1.47.0 never ends on f_misstable and f_illitable_flexbg (it relocates an inode table,
# cannot write it, and tries again): real hangs that the module's scan_timeout ends, set low here as
# the corpus's filesystems are at most 32 MiB and take e2fsck well under a second.
FSCK_S = 10
HANG_S = 120  # one image's whole check
BUDGET_S = 60  # the module's own budget for one image (ami_precheck_budget_s): none may run out of it
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, "": open}


def corpus_images(folder):
    """(name, path) of each tests/<name>/image{,.gz,.bz2} in an e2fsprogs tests folder."""
    found = []
    for name in sorted(os.listdir(folder)):
        for suffix in OPENERS:
            path = os.path.join(folder, name, "image" + suffix)
            if os.path.isfile(path):
                found.append((name + {".gz": "", ".bz2": ".bz2", "": ".raw"}[suffix], path))
    return found


def kept_images():
    """The fixtures: tests/fixtures/e2fsprogs/<name>.image.gz (or .bz2)."""
    return sorted((entry.split(".image")[0], os.path.join(KEPT, entry)) for entry in os.listdir(KEPT)
                  if ".image" in entry)


def unpack(source, dest):
    """Decompress an image, writing its runs of zeros as holes (some are 100s of MiB, mostly empty)."""
    opener = OPENERS[os.path.splitext(source)[1] if source.endswith((".gz", ".bz2")) else ""]
    with opener(source, "rb") as src, open(dest, "wb") as out:
        while True:
            block = src.read(1 << 16)
            if not block:
                break
            if block.count(0) == len(block):
                out.seek(len(block), os.SEEK_CUR)
            else:
                out.write(block)
        out.truncate()


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_image(name, source, work, catalog):
    """One image through the module, the report step and the verdict; what happened, as a dict."""
    raw = os.path.join(work, name + ".img")
    unpack(source, raw)
    try:
        fsck_rc = subprocess.run([E2FSCK, "-fn", raw], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, timeout=FSCK_S).returncode
    except subprocess.TimeoutExpired:
        fsck_rc = None  # no verdict from e2fsck: not clean
    before = sha256(raw)
    outcome = {"name": name, "e2fsck_rc": fsck_rc, "hang": False, "traceback": None, "verdict": None,
               "status": None, "rules": [], "errors": 0, "past_budget": None}
    start = time.monotonic()
    try:
        result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "image_module.py"),
                                 json.dumps({"image": raw, "scan_timeout": FSCK_S, "budget": BUDGET_S})], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=HANG_S)
    except subprocess.TimeoutExpired:
        outcome["hang"] = True
        return outcome
    finally:
        outcome["seconds"] = time.monotonic() - start
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        answer = {}
    if result.returncode != 0 or answer.get("failed") or "exception" in answer or "ext4_image_facts" not in answer:
        outcome["traceback"] = result.stdout.decode(errors="replace")[-2000:]
        return outcome
    outcome["unchanged"] = sha256(raw) == before
    facts = answer["ext4_image_facts"]
    outcome["past_budget"] = facts["image"]["incomplete"]
    # The facts record playbooks/ami_precheck.yml writes for the offline host, read as the report step reads it.
    record_path = os.path.join(work, name + ".json")
    with open(record_path, "w") as out:
        json.dump({"host": name, "groups": ["ami_precheck_offline"],
                   "status": "audited" if facts["image"]["root"] is not None else "failed",
                   "reason": None, "facts": facts}, out)
    now = datetime.datetime.now(datetime.timezone.utc)
    report = fleet.build_host_report(fleet.read_record(record_path), catalog, [], "corpus", now)
    outcome.update(verdict=reports.verdict([report], "high", True)[0], status=report["status"],
                   rules=sorted(set(f["rule"] for f in report["findings"])), errors=len(facts["errors"]),
                   fsck=[fs.get("fsck") for fs in facts["filesystems"]])
    return outcome


def check_all(images, work):
    catalog = catalog_mod.load(os.path.join(ROOT, "rules"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:  # the work is in subprocesses
        return list(pool.map(lambda image: check_image(image[0], image[1], work, catalog), images))


def tally(outcomes):
    damaged = [o for o in outcomes if o["e2fsck_rc"] != 0]
    return {
        "images": len(outcomes),
        "clean per e2fsck -fn": len(outcomes) - len(damaged),
        "with clear errors": sum(1 for o in outcomes if o["errors"]),
        "tracebacks": sum(1 for o in outcomes if o["traceback"]),
        "hangs": sum(1 for o in outcomes if o["hang"]),
        "past the budget": sum(1 for o in outcomes if o["past_budget"]),
        "passes": sum(1 for o in outcomes if o["verdict"] == "pass"),
        "IMAGE_FS_NOT_CLEAN": sum(1 for o in outcomes if "IMAGE_FS_NOT_CLEAN" in o["rules"]),
        "not audited (incomplete)": sum(1 for o in outcomes if o["status"] == "failed"),
        "damaged and judged only by IMAGE_NO_KERNEL": [o["name"] for o in damaged if o["status"] == "audited"
                                                       and "IMAGE_FS_NOT_CLEAN" not in o["rules"]],
        "slowest s": round(max([o["seconds"] for o in outcomes] or [0]), 1),
    }


def assert_judged(outcomes):
    counts = tally(outcomes)
    print("\n" + json.dumps(counts, indent=1))
    assert not [o for o in outcomes if o["traceback"]], [(o["name"], o["traceback"]) for o in outcomes if o["traceback"]]
    assert not [o["name"] for o in outcomes if o["hang"]]
    assert not [(o["name"], o["past_budget"]) for o in outcomes if o["past_budget"]]
    assert not [o["name"] for o in outcomes if not o["unchanged"]]
    assert not [o["name"] for o in outcomes if o["verdict"] == "pass"]
    assert counts["damaged and judged only by IMAGE_NO_KERNEL"] == []
    return counts


def test_kept_corpus_images(tmp_path):
    """The six images kept as fixtures: three that e2fsck -fn calls damaged, one on which it never ends,
    one whose journal needs recovery (e2fsck -n does not replay it, and passes it), and one that is clean."""
    outcomes = dict((o["name"], o) for o in check_all(kept_images(), str(tmp_path)))
    assert sorted(outcomes) == ["f_badroot", "f_dup_de", "f_holedir", "f_misstable", "f_okgroup",
                                "j_recover_csum2_64bit"]
    assert_judged(list(outcomes.values()))
    for name, rc in (("f_badroot", 12), ("f_dup_de", 4), ("f_holedir", 4)):
        assert outcomes[name]["e2fsck_rc"] == rc and "IMAGE_FS_NOT_CLEAN" in outcomes[name]["rules"], outcomes[name]
        assert outcomes[name]["fsck"][0]["problems"][-1].startswith("e2fsck -fn exited %d (" % rc)
    journal = outcomes["j_recover_csum2_64bit"]
    assert journal["e2fsck_rc"] == 0 and "IMAGE_FS_NOT_CLEAN" in journal["rules"], journal
    assert journal["fsck"] == [{"clean": False, "exit_code": 0, "problems": [
        "the journal needs recovery: the filesystem was not unmounted cleanly"]}]
    assert "IMAGE_FSTAB_UNRESOLVED" in outcomes["f_dup_de"]["rules"]
    endless = outcomes["f_misstable"]
    assert endless["e2fsck_rc"] is None and "IMAGE_FS_NOT_CLEAN" in endless["rules"], endless
    assert endless["fsck"][0]["exit_code"] is None and endless["seconds"] < FSCK_S + 10
    assert "e2fsck -fn: e2fsck did not finish in %d s: killed" % FSCK_S in endless["fsck"][0]["problems"]
    clean = outcomes["f_okgroup"]
    assert clean["e2fsck_rc"] == 0 and clean["fsck"] == [{"clean": True, "exit_code": 0, "problems": []}]
    assert [rule for rule in clean["rules"] if rule.startswith("IMAGE_")] == ["IMAGE_NO_KERNEL"]  # no kernel, only


@pytest.mark.skipif(not os.path.isdir(CORPUS), reason="e2fsprogs test corpus not at %s (make e2fsprogs-corpus "
                    "E2FSPROGS_GIT=..., or set EXT4AUDIT_E2FSPROGS_TESTS)" % CORPUS)
def test_whole_corpus(tmp_path):
    """Slow on purpose (about 3 minutes on 2 cores): every image of the corpus, each in its own module run."""
    images = corpus_images(CORPUS)
    assert len(images) > 200, "%s holds %d images: not the e2fsprogs tests folder?" % (CORPUS, len(images))
    start = time.monotonic()
    counts = assert_judged(check_all(images, str(tmp_path)))
    print("corpus of %d images checked in %.0f s" % (counts["images"], time.monotonic() - start))


@pytest.mark.parametrize("name", ["f_badroot", "f_okgroup"])
def test_kept_corpus_images_through_the_playbook(tmp_path, name):
    """The real pre-rollout playbook, not booting: a damaged image and a clean one (without a kernel) both fail
    the gate (the playbook stops: exit 2), the damaged one for IMAGE_FS_NOT_CLEAN."""
    source = dict(kept_images())[name]
    raw = str(tmp_path / (name + ".img"))
    unpack(source, raw)
    reports_dir, work = tmp_path / "reports", tmp_path / "work"
    work.mkdir()
    rc, out = ansible_playbook("playbooks/ami_precheck.yml", "-e", json.dumps({
        "image": raw, "ami_precheck_boot": False, "ext4_audit_reports_dir": str(reports_dir),
        "ami_precheck_name": name, "ami_precheck_work_parent": str(work)}))
    summary = load_json(str(reports_dir / "latest" / "summary.json"))
    assert rc != 0 and summary["verdict"] == "fail", (rc, summary["verdict"], out[-3000:])
    report = load_json(str(reports_dir / "latest" / "hosts" / (name + "-offline.json")))
    rules = sorted(set(f["rule"] for f in report["findings"] if f["severity"] in ("high", "critical")))
    # f_badroot's root folder cannot be listed, so its /etc/fstab is unread (IMAGE_FILE_UNREAD)
    assert rules == (["IMAGE_FILE_UNREAD", "IMAGE_FS_NOT_CLEAN", "IMAGE_NO_KERNEL"] if name == "f_badroot"
                     else ["IMAGE_NO_KERNEL"]), rules

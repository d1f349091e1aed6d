"""report.html of a real audit, opened in a real browser (Debian's chromium, driven headless by
chromedriver through selenium): the verdict and a hostile mount-point name show as text, nothing
of the host's runs, the page's own script runs under its Content-Security-Policy, sorting and
filtering of the fleet table work, and a host's detail loads on demand from report-data/. And a
page of 100,000 synthetic hosts is usable within 2 s of navigation. `make test-deps` installs
chromium and chromium-driver."""

import datetime
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from conftest import ROOT, VENV_BIN, ansible_playbook, load_json, needs_root
from ext4audit.formats import html
from ext4audit.report import finding_groups
from ext4audit.report import reports
from ext4audit.rules import catalog

pytestmark = needs_root

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# A directory name cannot hold "/", so "</script>" makes two levels; the mount point is the whole path.
HOSTILE = 'odd <script>window.__pwned=1</script> "q" $(id) `x`\nname'


@pytest.fixture
def browser(tmp_path):
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(path)]
    assert not missing, "%s missing: `make test-deps` installs chromium and chromium-driver" % ", ".join(missing)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # As root chromium needs --no-sandbox; the network flags keep it from calling out (the
    # machine has no network, and each refused connection would be logged).
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1280,1000", "--user-data-dir=%s" % (tmp_path / "chromium-profile")):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def audit_with_probe(loopfs, tmp_path):
    """The real playbook on this machine (probe on, replicating the hostile-named filesystem) and on
    a host that refuses ssh: two rows, an incomplete verdict."""
    target = loopfs.make("hostile", mountpoint=os.path.join(loopfs.base, "mnt", HOSTILE))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ext4_audit_become: false\n  hosts:\n"
        "    localhost:\n      ansible_connection: local\n      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        "      chopper_probe_enabled: true\n"
        "    gone-1:\n      ansible_host: 127.0.0.1\n      ansible_port: 9\n      ansible_connection: ssh\n"
        "      ansible_ssh_common_args: '-o ConnectTimeout=3 -o StrictHostKeyChecking=no -o BatchMode=yes'\n")
    reports_dir = tmp_path / "reports"
    scratch_dir = "/dev/shm/ext4-audit-probe-html-%d" % os.getpid()
    extra = {"ext4_audit_reports_dir": str(reports_dir), "chopper_probe_mountpoint": target["mountpoint"],
             "chopper_probe_scratch_dir": scratch_dir, "chopper_probe_runs": 32, "chopper_probe_repetitions": 2,
             "chopper_probe_poll_s": 1, "chopper_probe_keep_cache": False,
             # every confirmation, the host's own and the one only for reference (nodelalloc)
             "chopper_probe_confirm_scope": "all"}
    rc, out = ansible_playbook("-i", str(inventory), "playbooks/audit.yml", "-e", json.dumps(extra))
    assert "verdict: incomplete" in out, out[-6000:]
    runs = [p for p in glob.glob(str(reports_dir / "*")) if os.path.isdir(p) and not p.endswith("latest")]
    assert len(runs) == 1, runs
    return target["mountpoint"], runs[0]


def fleet_hosts(driver):
    rows = driver.find_elements(By.CSS_SELECTOR, "#fleet-table tbody tr")
    return [row.find_element(By.TAG_NAME, "td").text for row in rows if row.is_displayed()]


def check_probe_section_opens_with_sentences(browser, mountpoint):
    """The probe section starts with what was measured for this host, shown above the numbers and
    plots; the tail plot's axis names levels by what they mean."""
    heading = browser.find_element(By.XPATH, "//h3[starts-with(normalize-space(.), 'Probe: ran')]")
    opening = heading.find_element(By.XPATH, "following-sibling::*[1]")
    assert opening.get_attribute("class") == "probe-actions" and opening.is_displayed()
    sentences = [li.get_attribute("textContent") for li in opening.find_elements(By.TAG_NAME, "li")]
    # the loop filesystem has ext4's defaults (data=ordered, delalloc, auto_da_alloc): the rename
    # measurement is its configuration, the nodelalloc one is for reference only
    rename = [s for s in sentences if s.startswith("Rename over an existing file: ")]
    assert len(rename) == 1 and "on this kernel, measured on a replica of %s" % mountpoint in rename[0], sentences
    assert "; your %s uses it." % mountpoint in rename[0]
    assert [s for s in sentences if s.startswith("Buffered write + fsync: ") and
            s.endswith("For reference; not your configuration: %s does not use nodelalloc." % mountpoint)], sentences
    assert [s for s in sentences if s.startswith("Your disk size (1 GiB: %s is 1 GiB) is " % mountpoint)], sentences
    # above the probe's statistics and every plot, as a person scrolls
    top = browser.execute_script("return arguments[0].getBoundingClientRect().bottom", opening)
    below = browser.execute_script(
        "const o = arguments[0];"
        "return Array.from(o.closest('details.host').querySelectorAll('figure.plot, table'))"
        "  .filter(e => o.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING)"
        "  .map(e => e.getBoundingClientRect().top)", opening)
    assert len(below) == 5 and min(below) > top, (top, below)  # quantiles, three plots, confirmations
    figure = browser.find_element(By.XPATH, "//figure[figcaption[starts-with(., 'Tail share per factor level')]]")
    shown = [t.get_attribute("textContent") for t in figure.find_elements(By.CSS_SELECTOR, "svg text")]
    assert "runs of the level in the tail (%)" in shown, shown
    assert not [t for t in shown if re.fullmatch(r"[01]{3,}|\[[0-9, ]+\]", t)], shown  # no bit strings, no lists
    named = re.compile(r"order \d-\d-\d-\d|no fsync|fsync after .*|close \+ sync after .*|[0-9.]+ [KMG]iB|\d+% used|"
                       r"\d+ CPUs?|\d+ files?|span \d+|\d+% written.*|(not )?fragmented.*")
    assert len([t for t in shown if named.fullmatch(t)]) >= 8, shown


def test_report_in_headless_chromium(loopfs, tmp_path, browser):
    mountpoint, run_dir = audit_with_probe(loopfs, tmp_path)
    summary = load_json(os.path.join(run_dir, "summary.json"))
    local = load_json(os.path.join(run_dir, "hosts", "localhost.json"))
    assert summary["verdict"] == "incomplete"
    assert local["probe"]["status"] == "ran" and local["probe"]["mountpoint"] == mountpoint, local["probe"]
    page = os.path.join(run_dir, "report.html")

    # What it costs to make, measured on this run's own reports.
    started = time.monotonic()
    text = html.render(summary, [load_json(os.path.join(run_dir, "hosts", name)) for name in
                                 sorted(os.listdir(os.path.join(run_dir, "hosts")))], catalog.load(), run_dir)
    print("\nreport.html of this run (1 host with a 32-run probe, 1 unreachable): %.2f s, %d KiB" % (
        time.monotonic() - started, len(text.encode()) // 1024))

    browser.get("file://" + page)
    assert browser.find_element(By.ID, "verdict-word").text == "INCOMPLETE"
    assert browser.find_element(By.ID, "verdict-reason").text == summary["reason"]
    body = browser.find_element(By.TAG_NAME, "body")
    assert "Verdict: INCOMPLETE" in body.text
    # The hostile mount point is text: exactly, newline and all, in elements people see.
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('.host-data')).filter("
        "  e => e.textContent === arguments[0] && e.offsetHeight > 0).length", mountpoint)
    assert shown >= 3, "the mount point should show as text in findings, facts and the probe"
    assert HOSTILE.split("\n")[0] in body.text  # rendered text, as a person sees it
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    # ours and the fleet table's data (JSON, never run); a details file only when a host is opened
    assert browser.execute_script("return Array.from(document.scripts).map(s => s.type || 'js')") == [
        "application/json", "js"]
    # The page's own script ran (its hash is in the policy): it shows the controls.
    assert browser.find_element(By.ID, "fleet-controls").is_displayed()
    assert browser.find_element(By.ID, "fleet-count").text == "2 of 2 hosts shown"
    refused = [entry["message"] for entry in browser.get_log("browser") if "Content Security Policy" in entry["message"]
               or "Refused" in entry["message"]]
    assert not refused, refused
    # Three probe plots, drawn at a real size.
    sizes = browser.execute_script(
        "return Array.from(document.querySelectorAll('figure.plot svg')).map(s => s.getBoundingClientRect().width)")
    assert len(sizes) == 3 and min(sizes) > 300, sizes
    check_probe_section_opens_with_sentences(browser, mountpoint)

    # A screenshot of the whole page, kept with the test's files.
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(height, 12000))
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    print("screenshot: %s (%d KiB)" % (shot, shot.stat().st_size // 1024))
    with Image.open(str(shot)) as image:
        assert image.format == "PNG" and image.width >= 1000 and image.height >= 1000, image.size
        colours = image.convert("RGB").resize((64, 64)).getcolors(4096)
        assert len(colours) > 20, "the screenshot is almost one colour: nothing rendered?"

    # Sorting: by worst severity (worst first), then by host name.
    assert fleet_hosts(browser) == ["gone-1", "localhost"]
    headers = browser.find_elements(By.CSS_SELECTOR, "#fleet-table thead th button")
    by_name = dict((button.text, button) for button in headers)
    by_name["worst"].click()
    assert fleet_hosts(browser) == ["localhost", "gone-1"]
    by_name["host"].click()
    assert fleet_hosts(browser) == ["gone-1", "localhost"]
    by_name["host"].click()
    assert fleet_hosts(browser) == ["localhost", "gone-1"]
    # Filtering: by status, by worst severity, by part of the name.
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("unreachable")
    assert fleet_hosts(browser) == ["gone-1"] and browser.find_element(By.ID, "fleet-count").text == "1 of 2 hosts shown"
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("")
    Select(browser.find_element(By.ID, "filter-worst")).select_by_visible_text("info")
    assert fleet_hosts(browser) == ["localhost"]
    Select(browser.find_element(By.ID, "filter-worst")).select_by_value("-1")
    browser.find_element(By.ID, "filter-host").send_keys("gone")
    assert fleet_hosts(browser) == ["gone-1"]

    # A host's detail, loaded on demand from report-data/ (a script the page inserts): the hostile
    # mount point is text there too, and nothing of it ran.
    browser.find_element(By.ID, "filter-host").clear()
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("audited")
    browser.find_element(By.CSS_SELECTOR, "#fleet-table tbody a[data-host]").click()
    detail = open_detail(browser, "localhost")
    assert "Findings (%d)" % len(local["findings"]) in detail.text
    shown_in_detail = browser.execute_script(
        "return Array.from(document.querySelectorAll('#host-detail .host-data')).filter("
        "  e => e.textContent === arguments[0] && e.offsetHeight > 0).length", mountpoint)
    assert shown_in_detail >= 2, "the mount point should show as text in the detail's findings and filesystems"
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    assert browser.execute_script("return Array.from(document.scripts).map(s => s.getAttribute('src'))"
                                  ".filter(src => src)") == ["report-data/hosts-000000.js"]
    full = detail.find_element(By.LINK_TEXT, "full report (JSON)")
    assert full.get_attribute("href") == "file://" + os.path.join(run_dir, "hosts", "localhost.json")
    # the worst hosts' table opens a detail too: the unreachable host, with its reason
    browser.find_element(By.CSS_SELECTOR, "#worst-table a[data-host]").click()
    detail = open_detail(browser, "gone-1")
    assert "Not audited (unreachable)" in detail.text
    refused = [entry["message"] for entry in browser.get_log("browser") if "Content Security Policy" in entry["message"]
               or "Refused" in entry["message"]]
    assert not refused, refused


def open_detail(browser, host, timeout=5):
    """The detail panel once it shows `host` (its data loaded)."""
    deadline = time.monotonic() + timeout
    detail = browser.find_element(By.ID, "host-detail")
    while detail.get_attribute("data-shown") != host:
        assert time.monotonic() < deadline, "no detail of %s: %s" % (host, detail.text[:500])
        time.sleep(0.05)
    assert detail.is_displayed()
    return detail


BIG_FLEET = 100000
REAL_HOSTS = 300  # hosts of bench/aggregate.py's fleet reported by the real report step


def synthetic_run(folder, hosts):
    """A run folder of `hosts` hosts made fast: the real report step on REAL_HOSTS hosts of
    bench/aggregate.py's synthetic fleet (real fixtures, ~15 findings a host), whose host reports
    are then cloned under new names; html's own functions make report.html and report-data/ of
    the clones (digests, details, findings groups), as the report step's writer does."""
    sys.path[:0] = [os.path.join(ROOT, "bench")]
    try:
        import aggregate
    finally:
        del sys.path[0]
    real = os.path.join(folder, "real")
    specs = aggregate.fleet(REAL_HOSTS, 20261129, baseline=False)
    aggregate.write_run(real, specs)
    result = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "report", real, "--formats", "tap"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert result.returncode in (0, 1, 2), result.stderr.decode()[-2000:]  # pass, fail, incomplete
    base = [load_json(path) for path in sorted(glob.glob(os.path.join(real, "hosts", "*.json")))]
    digests_of = [reports.digest(report, "high") for report in base]
    run_dir = os.path.join(folder, "run")
    os.makedirs(os.path.join(run_dir, html.DATA))
    details, groups, digests = html.Details(os.path.join(run_dir, html.DATA)), finding_groups.FindingGroups(), []
    for index in range(hosts):
        name = "host-%06d.dc%d.example.org" % (index, index % 7)
        report, digest = dict(base[index % REAL_HOSTS], host=name), digests_of[index % REAL_HOSTS]
        digest = dict(digest, host=name, index=index, row=dict(digest["row"], host=name), section=False)
        details.add(report, digest)
        groups.add_host(report)
        digests.append(digest)
    details.flush()
    now = datetime.datetime(2026, 11, 29, tzinfo=datetime.timezone.utc)
    summary = reports.summarize_digests(digests, "run-big", "high", True, now)
    with open(os.path.join(run_dir, "report.html"), "w", encoding="utf-8") as out:
        html.write_page(out, summary, digests, (), groups, catalog.load(), run_dir)
    return run_dir, summary


def test_a_page_of_100000_hosts_is_usable_within_2_s(tmp_path, browser):
    started = time.monotonic()
    run_dir, summary = synthetic_run(str(tmp_path), BIG_FLEET)
    page = os.path.join(run_dir, "report.html")
    data = sum(os.path.getsize(path) for path in glob.glob(os.path.join(run_dir, html.DATA, "*.js")))
    print("\n%d hosts made in %.1f s: report.html %.1f MB, report-data/ %.1f MB (%d bytes a host in all)" % (
        BIG_FLEET, time.monotonic() - started, os.path.getsize(page) / 1e6, data / 1e6,
        (os.path.getsize(page) + data) // BIG_FLEET))
    assert os.path.getsize(page) + data < 3000 * BIG_FLEET  # the page's share of the 15 KB a host

    browser.get("file://" + page)
    # usable: the verdict shows, the table holds its first page of every host, the controls work
    assert browser.find_element(By.ID, "verdict-word").text == summary["verdict"].upper()
    assert browser.find_element(By.ID, "fleet-count").text == "%d of %d hosts shown" % (BIG_FLEET, BIG_FLEET)
    assert browser.find_element(By.ID, "page-where").text == "page 1 of %d" % (BIG_FLEET // 100)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#fleet-table tbody tr")) == 100
    ready = browser.execute_script(
        "return Math.max(performance.getEntriesByType('navigation')[0].loadEventEnd,"
        "  performance.getEntriesByName('fleet-table-drawn')[0].startTime)")
    # a host's detail: from the click to its data shown, timed in the page
    opened = browser.execute_script("window.__t0 = performance.now(); return window.__t0")
    browser.find_element(By.CSS_SELECTOR, "#worst-table a[data-host]").click()
    host = browser.find_element(By.CSS_SELECTOR, "#worst-table a[data-host]").text
    detail = open_detail(browser, host)
    loaded = browser.execute_script("return performance.getEntriesByName('host-detail-shown').slice(-1)[0].startTime")
    print("usable %.0f ms after navigation start; a host's detail %.0f ms after the click" % (ready, loaded - opened))
    assert "Findings (" in detail.text
    assert ready + (loaded - opened) < 2000, (ready, loaded - opened)
    # sorting and filtering over every host, still a page of rows
    headers = dict((b.text, b) for b in browser.find_elements(By.CSS_SELECTOR, "#fleet-table thead th button"))
    headers["host"].click()
    assert fleet_hosts(browser)[:2] == ["host-000000.dc0.example.org", "host-000001.dc1.example.org"]
    headers["host"].click()
    assert fleet_hosts(browser)[0] == "host-%06d.dc%d.example.org" % (BIG_FLEET - 1, (BIG_FLEET - 1) % 7)
    browser.find_element(By.ID, "filter-host").send_keys("host-00004")
    assert browser.find_element(By.ID, "fleet-count").text == "10 of %d hosts shown" % BIG_FLEET
    assert len(fleet_hosts(browser)) == 10
    refused = [entry["message"] for entry in browser.get_log("browser") if "Content Security Policy" in entry["message"]
               or "Refused" in entry["message"]]
    assert not refused, refused

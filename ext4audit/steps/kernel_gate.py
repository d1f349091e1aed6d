"""The kernel-upgrade gate: the same seeded probe plan on a baseline and a candidate, compared
treatment by treatment, plus the static rules on the candidate.

Fails when any of these holds (each a check with its numbers in the report):
- d-span: the paired one-sided Wilcoxon signed-rank test says the candidate's d-spans are larger
  (p < alpha), the matched-pairs rank-biserial effect size is at least `min_effect`, and the
  candidate's p99 d-span is more than `dspan_tolerance` above the baseline's;
- tail share: the share of candidate runs at or above the baseline's p90 d-span exceeds the
  baseline's own share (10% by construction) by more than `tail_tolerance` (absolute);
- a confirmation probe: the candidate's ratio exceeds the baseline's by more than
  `ratio_tolerance` (relative) and the two spreads do not overlap;
- allocator issues: one of Chopper's four allocator issues is `present` on the candidate and
  `absent` on the baseline (an `inconclusive` or unmeasured side is reported, never a failure);
- static rules: the candidate has an unwaived finding at or above `fail_on` that the baseline
  does not have (a known kernel issue in the candidate's version, for example);
- kernel records: the candidate's kernel lacks the fix of a kernel CNA record (ext4/jbd2, from
  kernel_records) that the baseline's kernel did not lack, and the record's class is one of
  `record_fail_classes`; records judged only as an advisory (vendor kernels that backport, rcs
  at a boundary) are listed but never fail;
- fstab options: an fstab entry of either host's filesystems (the same machine image) names a
  mount option that the candidate's kernel refuses (rules/removed_mount_options.yml): that
  filesystem would not mount after the upgrade. Options a backporting vendor's kernel may refuse
  are listed, never failing.
Incomplete (exit 2) when either side has no usable probe result or they used different plans.
"""

import math

import numpy as np

from ext4audit import DEFAULT_FAIL_ON, severity_rank
from ext4audit.model import contract
from ext4audit.probe import analysis as probe
from ext4audit.rules import kernel_records, mount_options

SCHEMA = contract.KERNEL_GATE_SCHEMA
DEFAULTS = {"alpha": 0.01, "min_effect": 0.3, "dspan_tolerance": 0.10, "tail_tolerance": 0.10,
            "ratio_tolerance": 0.25, "fail_on": DEFAULT_FAIL_ON,
            "record_fail_classes": ["data corruption", "crash/BUG"]}


class GateInputError(ValueError):
    """A side cannot be compared (no probe result, a different plan); the gate is incomplete."""


class PolicyError(ValueError):
    """The policy names something the data does not have (a record class, for example)."""


def _runs(record, side):
    result = (record or {}).get("result") or {}
    sweep = result.get("sweep") or {}
    if (record or {}).get("status") != "ran" or not sweep.get("runs"):
        raise GateInputError("%s: no probe sweep to compare (status %s: %s)" % (
            side, (record or {}).get("status"), (record or {}).get("reason")))
    return dict((run["id"], run["dspan"]) for run in sweep["runs"])


def compare_dspan(baseline_runs, candidate_runs, policy):
    ids = sorted(set(baseline_runs) & set(candidate_runs))
    if len(ids) < 8:
        raise GateInputError("only %d treatments completed on both sides (need 8)" % len(ids))
    base = np.array([baseline_runs[i] for i in ids], dtype=float)
    cand = np.array([candidate_runs[i] for i in ids], dtype=float)
    diff = cand - base
    nonzero = diff[diff != 0]
    if len(nonzero) == 0:
        p_value, effect = 1.0, 0.0
    else:
        from scipy import stats  # slow to import (about 0.8 s); every other command runs without it
        p_value = float(stats.wilcoxon(cand, base, alternative="greater", zero_method="wilcox").pvalue)
        ranks = stats.rankdata(np.abs(nonzero))
        effect = float((ranks[nonzero > 0].sum() - ranks[nonzero < 0].sum()) / ranks.sum())
    q = dict((name, (float(np.quantile(base, p)), float(np.quantile(cand, p))))
             for name, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)))
    threshold = q["p90"][0]
    tail_base, tail_cand = float(np.mean(base >= threshold)), float(np.mean(cand >= threshold))
    p99_change = q["p99"][1] / q["p99"][0] - 1 if q["p99"][0] else (math.inf if q["p99"][1] else 0.0)
    regressed = p_value < policy["alpha"] and effect >= policy["min_effect"] and p99_change > policy["dspan_tolerance"]
    tail_regressed = tail_cand - tail_base > policy["tail_tolerance"]
    return {
        "paired_treatments": len(ids),
        "quantiles": dict((k, {"baseline": b, "candidate": c}) for k, (b, c) in q.items()),
        "p99_change": p99_change,
        "wilcoxon_p": p_value, "effect_size": effect,
        "median_ratio": float(np.median(cand[base > 0] / base[base > 0])) if np.any(base > 0) else None,
        "tail_share": {"baseline": tail_base, "candidate": tail_cand, "threshold": threshold},
        "checks": [
            {"check": "dspan", "failed": bool(regressed),
             "detail": "p99 %+.1f%%, Wilcoxon p=%.3g, effect %.2f (fail: p<%g, effect>=%g, p99>+%d%%)" % (
                 100 * p99_change, p_value, effect, policy["alpha"], policy["min_effect"],
                 round(100 * policy["dspan_tolerance"]))},
            {"check": "tail_share", "failed": bool(tail_regressed),
             "detail": "runs at or above the baseline's p90: %.0f%% vs %.0f%% (fail: > +%d points)" % (
                 100 * tail_cand, 100 * tail_base, round(100 * policy["tail_tolerance"]))}]}


def compare_confirmations(baseline, candidate, policy):
    def by_key(record):
        entries = ((record or {}).get("result") or {}).get("confirmations") or []
        return dict(((e["id"], e.get("mountpoint")), e) for e in entries if e.get("status") == "measured"
                    and e.get("ratio"))
    base, cand = by_key(baseline), by_key(candidate)
    rows = []
    for key in sorted(set(base) | set(cand), key=lambda k: (k[0], k[1] or "")):
        b, c = base.get(key), cand.get(key)
        row = {"probe": key[0], "mountpoint": key[1], "baseline": b and b["ratio"], "candidate": c and c["ratio"],
               "baseline_spread": b and b["ratio_spread"], "candidate_spread": c and c["ratio_spread"],
               "failed": False}
        if b and c:
            change = c["ratio"] / b["ratio"] - 1
            apart = c["ratio_spread"][0] > b["ratio_spread"][1]
            row.update(change=change, failed=bool(change > policy["ratio_tolerance"] and apart),
                       detail="ratio %.2f -> %.2f (%+.0f%%), spreads %s" % (
                           b["ratio"], c["ratio"], 100 * change, "apart" if apart else "overlap"))
        else:
            row["detail"] = "measured on one side only"
        rows.append(row)
    return rows


def compare_allocator(baseline, candidate):
    """The four allocator verdicts side by side (the probe's `allocator` section). A regression
    (`failed`) is an issue present on the candidate and absent on the baseline; a verdict that is
    inconclusive or missing on either side is listed with its reason and never fails."""
    def by_id(record):
        section = ((record or {}).get("result") or {}).get("allocator") or {}
        return dict((issue["id"], issue) for issue in section.get("issues") or [])
    base, cand = by_id(baseline), by_id(candidate)
    rows = []
    for issue_id, name in probe.ALLOCATOR_ISSUES.items():
        b, c = base.get(issue_id) or {}, cand.get(issue_id) or {}
        row = {"id": issue_id, "name": name, "baseline": b.get("verdict"), "candidate": c.get("verdict"),
               "failed": b.get("verdict") == "absent" and c.get("verdict") == "present"}
        notes = ["%s %s: %s" % (side, "not measured" if not issue else issue["verdict"],
                                (issue or {}).get("reason") or "no reason given")
                 for side, issue in (("baseline", b), ("candidate", c))
                 if not issue or issue["verdict"] == "inconclusive"]
        row["detail"] = "%s -> %s%s" % (row["baseline"] or "not measured", row["candidate"] or "not measured",
                                        " (%s)" % "; ".join(notes) if notes else "")
        rows.append(row)
    return rows


def compare_findings(baseline_report, candidate_report, policy):
    """Unwaived findings at or above fail_on on the candidate that the baseline does not have
    (compared by rule and mount point: the two hosts are the same machine image)."""
    def keys(report):
        return set((f["rule"], f.get("mountpoint")) for f in (report or {}).get("findings") or []
                   if not f.get("waived") and severity_rank(f["severity"]) >= severity_rank(policy["fail_on"]))
    new = sorted(keys(candidate_report) - keys(baseline_report), key=lambda k: (k[0], k[1] or ""))
    return [{"rule": rule, "mountpoint": mountpoint} for rule, mountpoint in new]


def compare_records(doc, baseline_report, candidate_report, policy):
    """The kernel CNA records whose fix each side's kernel lacks (kernel_records.open_records),
    compared: `fixed` by the upgrade (open on the baseline only, the baseline's items), `carried`
    (open on both, the candidate's items) and `new` (open on the candidate only: a branch whose
    fix came later than the candidate, or an older candidate). A new record fails (`fails`) when
    its class is in record_fail_classes and it is not advisory. `unknown` names the sides whose
    kernel cannot be judged (no host report, an unrecognised release): then the lists are empty."""
    classes = policy["record_fail_classes"]
    strange = [c for c in classes if c not in doc["classes"]]
    if strange:
        raise PolicyError("record_fail_classes: %s not among the records' classes (%s)" % (
            ", ".join(map(repr, strange)), ", ".join(doc["classes"])))
    result = {"data": doc["source"], "fixed": [], "carried": [], "new": [], "unknown": []}
    open_ids = {}
    for role, report in (("baseline", baseline_report), ("candidate", candidate_report)):
        kernel = (report or {}).get("kernel")
        items = kernel_records.open_records(doc, kernel) if kernel else None
        if items is None:
            result["unknown"].append(role)
        open_ids[role] = dict((item["id"], item) for item in items or [])
    if result["unknown"]:
        return result
    base, cand = open_ids["baseline"], open_ids["candidate"]
    result["fixed"] = [item for key, item in base.items() if key not in cand]
    result["carried"] = [item for key, item in cand.items() if key in base]
    result["new"] = [dict(item, fails=item["class"] in classes and not item["advisory"])
                     for key, item in cand.items() if key not in base]
    return result


def compare_mount_options(baseline_report: dict, candidate_report: dict, removed: dict = None) -> dict:
    """The fstab options of both hosts' filesystems that the candidate's kernel refuses
    (mount_options.refused): `refused` (each with the host role whose report has the entry, its
    mount point and fstab line), `unknown` (a backporting vendor's candidate may refuse them, with
    why), and `not_compared` (why nothing was compared: no candidate kernel) or None. An entry in
    both reports (the same mount point and option) is listed once, from the baseline."""
    result = {"refused": [], "unknown": [], "not_compared": None}
    kernel = (candidate_report or {}).get("kernel")
    if not kernel:
        result["not_compared"] = "no candidate host report with its kernel"
        return result
    seen = set()
    for role, report in (("baseline", baseline_report), ("candidate", candidate_report)):
        for fs in (report or {}).get("filesystems") or []:
            fstab = fs.get("fstab") or {}
            refused, unknown = mount_options.refused(fstab.get("options"), kernel, removed)
            for key, items in (("refused", refused), ("unknown", unknown)):
                for item in items:
                    if (fs.get("mountpoint"), item["option"]) not in seen:
                        seen.add((fs.get("mountpoint"), item["option"]))
                        result[key].append(dict(item, host=role, mountpoint=fs.get("mountpoint"),
                                                line=fstab.get("line")))
    return result


def _refused_check(item: dict, kernel: str) -> str:
    """The failed check of an fstab option the candidate refuses."""
    return ("fstab option %s on %s (%s fstab line %s) is refused by the candidate kernel %s (removed in %s, %s): "
            "the filesystem would not mount" % (item["option"], item["mountpoint"], item["host"], item["line"],
                                                kernel, item["removed_in"], item["commit"]))


def evaluate(baseline, candidate, plan_ids, policy=None, records=None):
    """baseline/candidate: {"host", "record" (probe record), "report" (host report)}.
    plan_ids: (baseline plan seed/runs/level set, candidate's) - they must match.
    records: kernel_records.load()'s result (default: the repository's data file)."""
    policy = dict(DEFAULTS, **(policy or {}))
    gate = {"schema": SCHEMA, "policy": policy, "verdict": "incomplete", "reason": None,
            "baseline": _side(baseline), "candidate": _side(candidate),
            "dspan": None, "allocator": [], "confirmations": [], "new_findings": [], "failed_checks": [],
            # listed even when the probe comparison is incomplete: it needs only the host reports
            "kernel_records": compare_records(records or kernel_records.load(), baseline["report"],
                                              candidate["report"], policy),
            "mount_options": compare_mount_options(baseline["report"], candidate["report"])}
    try:
        if plan_ids[0] != plan_ids[1]:
            raise GateInputError("the two sides ran different plans: %s vs %s" % plan_ids)
        gate["dspan"] = compare_dspan(_runs(baseline["record"], "baseline"),
                                      _runs(candidate["record"], "candidate"), policy)
    except GateInputError as exc:
        gate["reason"] = str(exc)
        return gate
    gate["allocator"] = compare_allocator(baseline["record"], candidate["record"])
    gate["confirmations"] = compare_confirmations(baseline["record"], candidate["record"], policy)
    gate["new_findings"] = compare_findings(baseline["report"], candidate["report"], policy)
    failed = [c["check"] + ": " + c["detail"] for c in gate["dspan"]["checks"] if c["failed"]]
    failed += ["allocator issue %s: %s" % (r["name"], r["detail"]) for r in gate["allocator"] if r["failed"]]
    failed += ["confirmation %s: %s" % (r["probe"], r["detail"]) for r in gate["confirmations"] if r["failed"]]
    failed += ["new finding %s on %s" % (f["rule"], f["mountpoint"]) for f in gate["new_findings"]]
    failed += ["new kernel record %s (%s): %s" % (r["id"], r["class"], r["reason"])
               for r in gate["kernel_records"]["new"] if r["fails"]]
    failed += [_refused_check(item, gate["candidate"]["kernel"]) for item in gate["mount_options"]["refused"]]
    gate["failed_checks"] = failed
    gate["verdict"] = "fail" if failed else "pass"
    gate["reason"] = "; ".join(failed) if failed else "no regression beyond the tolerances"
    return gate


def _side(side):
    report = side.get("report") or {}
    kernel = report.get("kernel") or {}
    return {"host": side["host"], "kernel": kernel.get("release"), "upstream": kernel.get("upstream")}


def markdown(gate, escape):
    """The gate report for people; `escape` is the Markdown escaper of reports.py."""
    b, c = gate["baseline"], gate["candidate"]
    lines = ["## Kernel gate: %s" % gate["verdict"].upper(), "",
             "Baseline %s (%s) vs candidate %s (%s): %s" % (
                 escape(b["host"]), escape(b["kernel"] or "?"), escape(c["host"]), escape(c["kernel"] or "?"),
                 escape(gate["reason"] or "")), ""]
    d = gate["dspan"]
    if d:
        lines += ["| d-span | baseline | candidate |", "|---|---|---|"]
        lines += ["| %s | %.0f | %.0f |" % (k, v["baseline"], v["candidate"]) for k, v in d["quantiles"].items()]
        lines += ["", "%d paired treatments; Wilcoxon signed-rank p = %.3g; effect size %.2f; median ratio %s." % (
            d["paired_treatments"], d["wilcoxon_p"], d["effect_size"],
            "%.2f" % d["median_ratio"] if d["median_ratio"] is not None else "n/a"), ""]
        lines += ["- %s %s: %s" % ("FAIL" if ch["failed"] else "ok", ch["check"], escape(ch["detail"]))
                  for ch in d["checks"]]
    for row in gate["allocator"]:
        lines.append("- %s allocator issue %s: %s" % ("FAIL" if row["failed"] else "ok", row["name"],
                                                     escape(row["detail"])))
    for row in gate["confirmations"]:
        lines.append("- %s confirmation %s%s: %s" % ("FAIL" if row["failed"] else "ok", row["probe"],
                                                     " on " + escape(row["mountpoint"]) if row["mountpoint"] else "",
                                                     escape(row["detail"])))
    for finding in gate["new_findings"]:
        lines.append("- FAIL new finding %s on %s" % (finding["rule"], escape(finding["mountpoint"] or "-")))
    return "\n".join(lines + _mount_options_markdown(gate, escape) + _records_markdown(gate, escape)) + "\n"


def _mount_options_markdown(gate, escape):
    """The fstab options the candidate refuses (a failure) or may refuse (listed); nothing when none."""
    options = gate.get("mount_options") or {}
    lines = []
    for item in options.get("refused") or []:
        lines.append("- FAIL " + escape(_refused_check(item, gate["candidate"]["kernel"])))
    for item in options.get("unknown") or []:
        lines.append("- fstab option %s on %s (%s fstab line %s) may be refused by the candidate: %s" % (
            escape(item["option"]), escape(item["mountpoint"] or "-"), item["host"], escape(str(item["line"])),
            escape(item["why"])))
    return ["", "### fstab options and the candidate kernel", ""] + lines if lines else []


RECORD_LISTS = (("new", "New in the candidate"), ("carried", "Still carried by the candidate"),
                ("fixed", "Fixed by the upgrade"))


def _records_markdown(gate, escape):
    records = gate["kernel_records"]
    # ids, classes and the date are the repository's data (like rule ids); titles come from the CNA's
    # text and reasons carry the host's version: those are escaped
    lines = ["", "### ext4/jbd2 kernel records (kernel CNA data of %s)"
             % (records["data"].get("commit_date") or "unknown date")[:10], ""]
    if records["unknown"]:
        return lines + ["Not compared: the %s kernel cannot be judged (no host report or an unrecognised release)."
                        % " and ".join(records["unknown"])]
    lines.append("Upstream %s -> %s: %s." % (
        escape(gate["baseline"]["upstream"] or "?"), escape(gate["candidate"]["upstream"] or "?"),
        ", ".join("%d %s" % (len(records[key]), title.lower()) for key, title in RECORD_LISTS)))
    for key, title in RECORD_LISTS:
        lines += ["", "**%s (%d)**" % (title, len(records[key]))]
        lines += ["- %s[%s](%s) %s: %s (%s)" % ("FAIL " if item.get("fails") else "", item["id"], item["link"],
                                             item["class"], escape(item["title"]), escape(item["reason"]))
                  for item in records[key]]
    return lines

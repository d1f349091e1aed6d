"""What a host's probe results mean for its own configuration, in sentences a storage engineer
acts on: the top of the probe section in report.html and summary.md (the statistics follow).

- each measured confirmation: by how much the risky option set is slower on this kernel, whether
  the host's filesystem uses that option set (or the number is for reference only), and which of
  the host's findings it confirmed or did not reproduce;
- Chopper's four allocator issues on this kernel, when the probe diagnosed them (probe.allocator);
- whether the host's own configuration is in the tail region of the sweep, for the factors whose
  level the host's facts imply.

A sentence is a list of parts (text, kind): kind "" is our own wording, "host" a short host
string shown as code (a mount point, an option set the probe reported), "data" host-provided
prose, "code" an identifier of ours (a rule id). Every writer escapes every part.
"""

import math

from ext4audit.probe import analysis as probe

# The probe mounts every scratch filesystem with these (ext4_probe/job.py run_job: no background zeroing
# of inode tables): they are not part of the configuration a confirmation compares.
SCRATCH_ONLY_OPTIONS = ("noinit_itable",)
# What each confirmation probe times, in words (the probe's own metric names say it in jargon).
MEASURED = {
    "rename_over_existing": "Rename over an existing file",
    "buffered_write_fsync": "Buffered write + fsync",
    "xattr_set": "Setting an extended attribute",
    "netfs_mkdir_existing": "mkdir on an existing path",
}
SAME = 1.1          # a ratio within 10% of 1 reads as "about as fast"
TAIL_ALPHA = 0.05   # a level is in (or clear of) the tail region when chance explains its share this rarely
ISSUE_VERDICTS = (("present", "Present"), ("inconclusive", "Inconclusive"), ("absent", "Absent"))


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _times(value):
    return "%.2gx" % value


def percent(share):
    """A share (0..1) as a percentage: whole percents from 10%, one decimal below."""
    return "%.0f%%" % (100 * share) if share >= 0.1 or share == 0 else "%.1f%%" % (100 * share)


def _filesystem(report, mountpoint):
    for fs in report.get("filesystems") or []:
        if mountpoint is not None and fs.get("mountpoint") == mountpoint:
            return fs
    return None


def not_in_effect(report, entry):
    """The mount options the confirmation's risky side used that the host's probed filesystem
    does not have in effect: [] when the measured configuration is the host's own, None when the
    host's options are not known. A network-mount entry has no options: it times the host's own
    mount (against a local ext4), so it is always the host's."""
    risky = entry.get("risky") if isinstance(entry.get("risky"), dict) else {}
    fs = _filesystem(report, (report.get("probe") or {}).get("mountpoint"))
    if not isinstance(risky.get("options"), str) or fs is None or not isinstance(fs.get("options"), list):
        return None
    return [o for o in risky["options"].split(",") if o and o not in SCRATCH_ONLY_OPTIONS and o not in fs["options"]]


def _effect(entry):
    """How the risky side compares with the safe side, in words (parts)."""
    ratio, risky, safe = entry["ratio"], entry["risky"]["label"], entry["safe"]["label"]
    if ratio >= SAME:
        head = "%s slower with " % _times(ratio)
    elif ratio <= 1 / SAME:
        head = "%s faster with " % _times(1 / ratio)
    else:
        return [("about as fast (%s) with " % _times(ratio), ""), (risky, "host"), (" as with ", ""), (safe, "host")]
    return [(head, ""), (risky, "host"), (" than with ", ""), (safe, "host")]


def _measured(entry):
    return (entry.get("status") == "measured" and _number(entry.get("ratio")) and entry["ratio"] > 0
            and all(isinstance(entry.get(side), dict) and isinstance(entry[side].get("label"), str)
                    for side in ("risky", "safe")))


def _findings_of(report, entry):
    """The host's findings this entry measured (confirmed or not reproduced), and those of the
    same probe it could not measure (another filesystem, an error)."""
    measured, other = [], []
    for finding in report.get("findings") or []:
        conf = finding.get("confirmation")
        if not conf or conf.get("probe") != entry["id"]:
            continue
        if entry.get("mountpoint") and conf.get("probed_mountpoint") != entry["mountpoint"]:
            continue
        (measured if conf.get("status") in ("confirmed", "not_reproduced") else other).append(finding)
    return measured, other


def _verdict_parts(finding):
    conf = finding["confirmation"]
    where = [(" on ", ""), (finding["mountpoint"], "host")] if finding.get("mountpoint") else []
    if conf["status"] == "confirmed":
        raised = "; raised to %s" % finding["severity"] if finding.get("escalated_because") else ""
        return [(" Confirms ", ""), (finding["rule"], "code")] + where + [
            (" (%s or more confirms it%s)." % (_times(conf["threshold"]), raised), "")]
    return [(" Below the %s that confirms " % _times(conf["threshold"]), ""), (finding["rule"], "code")] + where + [
        (": not reproduced on this kernel.", "")]


def _confirmation(report, entry):
    """(sentence, whether it is about the host's own configuration)."""
    section = report["probe"]
    name = MEASURED.get(entry["id"], entry["id"])
    parts = [("%s: " % name, "")] + _effect(entry) + [(" on this kernel, measured", "")]
    if entry.get("mountpoint"):
        parts += [(" on ", ""), (entry["mountpoint"], "host")]
    elif section.get("mountpoint"):
        parts += [(" on a replica of ", ""), (section["mountpoint"], "host")]
    if _number(entry.get("repetitions")) and entry.get("ratio_spread"):
        low, high = entry["ratio_spread"]
        parts.append((" (%d repetition%s, %s to %s)" % (entry["repetitions"], "" if entry["repetitions"] == 1 else "s",
                                                         _times(low), _times(high)), ""))
    missing = not_in_effect(report, entry)
    yours = missing == []
    if yours:
        parts += [("; your ", ""), (entry.get("mountpoint") or section["mountpoint"], "host"), (" uses it.", "")]
    elif missing is None:
        parts.append(("; whether your filesystems use it is not known (no facts of the probed filesystem).", ""))
    else:
        parts += [(". For reference; not your configuration: ", ""), (section["mountpoint"], "host"),
                  (" does not use ", ""), (",".join(missing), "host"), (".", "")]
    measured, other = _findings_of(report, entry)
    for finding in sorted(measured, key=lambda f: f["confirmation"]["status"] != "confirmed"):
        parts += _verdict_parts(finding)
    for finding in other:
        parts += [(" ", ""), (finding["rule"], "code"), (" on ", ""), (finding.get("mountpoint") or "the host", "host"),
                  (" is not measured: ", ""), (finding["confirmation"].get("reason") or "no reason given", "data"),
                  (".", "")]
    return parts, yours


def confirmation_sentences(report):
    """One sentence per measured confirmation, those about the host's own configuration first,
    then one per finding whose probe has no measurement at all: with the reason, and "did not"
    rather than "could not" when the probe skipped it (not the host's option set, no network
    mount, the time budget)."""
    section = report["probe"]
    listed = [e for e in section.get("confirmations") or [] if isinstance(e, dict)]
    entries = [e for e in listed if _measured(e)]
    made = [_confirmation(report, entry) for entry in entries]
    out = [parts for parts, yours in made if yours] + [parts for parts, yours in made if not yours]
    measured_ids = set(e["id"] for e in entries)
    skipped_ids = set(e.get("id") for e in listed if e.get("status") == "skipped")
    for finding in report.get("findings") or []:
        conf = finding.get("confirmation")
        if conf and conf.get("probe") not in measured_ids:
            how = "did not measure it" if conf.get("probe") in skipped_ids else "could not measure it on this kernel"
            out.append([(finding["rule"], "code")] + ([(" on ", ""), (finding["mountpoint"], "host")]
                                                      if finding.get("mountpoint") else [])
                       + [(": the probe %s: " % how, ""), (conf.get("reason") or "no reason given", "data"), (".", "")])
    return out


def _issue_effect(issue):
    effect = issue.get("effect") if isinstance(issue.get("effect"), dict) else {}
    said = []
    if _number(effect.get("dspan_p90_ratio")):
        said.append("d-span p90 %s with the trigger than without" % _times(effect["dspan_p90_ratio"]))
    if _number(effect.get("tail_share_trigger")) and _number(effect.get("tail_share_control")):
        said.append("%s of trigger runs in the tail against %s" % (percent(effect["tail_share_trigger"]),
                                                                   percent(effect["tail_share_control"])))
    stats = ["p = %.2g" % issue["p_value"]] if _number(issue.get("p_value")) else []
    stats += ["%d pairs" % issue["pairs"]] if _number(issue.get("pairs")) else []
    return "; ".join(said + ([", ".join(stats)] if stats else []))


def allocator_sentences(section):
    """Chopper's four allocator issues on this kernel (probe.allocator), when the probe had them
    diagnosed; nothing when the section has no allocator key."""
    alloc = section.get("allocator")
    if not isinstance(alloc, dict):
        return []
    if alloc.get("status") != "ran":
        how = {"skipped": "were skipped", "error": "failed"}.get(alloc.get("status"), "did not run")
        return [[("Chopper's four allocator issues were not diagnosed on this kernel: the diagnostics %s: " % how, ""),
                 (str(alloc.get("reason") or "no reason given"), "data"), (".", "")]]
    issues = [i for i in alloc.get("issues") or [] if isinstance(i, dict)]
    present = [i for i in issues if i.get("verdict") == "present"]
    if present:
        lead = "This kernel shows %d of Chopper's four allocator issues (paired runs, trigger against control)." % len(present)
    elif issues and all(i.get("verdict") == "absent" for i in issues):
        lead = "This kernel shows none of Chopper's four allocator issues (paired runs, trigger against control)."
    else:
        lead = "Chopper's four allocator issues on this kernel (paired runs, trigger against control):"
    parts = [(lead, "")]
    for verdict, title in ISSUE_VERDICTS:
        group = [i for i in issues if i.get("verdict") == verdict]
        if group:
            parts.append((" %s: " % title, ""))
        for n, issue in enumerate(group):
            parts += [(", " if n else "", ""), (str(issue.get("name") or issue.get("id")), "data")]
            why = _issue_effect(issue) if verdict == "present" else issue.get("reason")
            if why:
                parts += [(" (", ""), (str(why), "data"), (")", "")]
        if group:
            parts.append((".", ""))
    return [parts]


def _binomial_tail(k, n, p, upper):
    """P(X >= k) (upper) or P(X <= k) for X ~ Binomial(n, p), 0 < p < 1, summed in logs."""
    def term(i):
        return math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                        + i * math.log(p) + (n - i) * math.log1p(-p))
    return min(1.0, sum(term(i) for i in (range(k, n + 1) if upper else range(0, k + 1))))


def _own_levels(report, section, values):
    """{factor: (level value, parts saying where it comes from)} for the factors the host's
    facts imply, and sentences for those it implies but the sweep did not cover."""
    fs = _filesystem(report, section.get("mountpoint")) or {}
    mountpoint = section.get("mountpoint")
    own, outside = {}, []
    sb = fs.get("superblock") or {}
    size = (sb["block_count"] * sb["block_size"] if _number(sb.get("block_count")) and _number(sb.get("block_size"))
            else fs.get("device_bytes"))
    if _number(size) and size > 0 and "DiskSize" in values:
        sizes = list(values["DiskSize"])
        nearest = min(sizes, key=lambda v: abs(math.log2(size / v)))
        if abs(math.log2(size / nearest)) <= 1:
            own["DiskSize"] = (nearest, [(mountpoint, "host"), (" is %s%s" % (probe.human_bytes(size), "" if size == nearest
                                                                              else ", the nearest size swept"), "")])
        else:
            outside.append([("Your ", ""), (mountpoint, "host"), (" is %s, outside the sweep's disk sizes (%s to %s): "
                                                                   "its size has no place in the tail map."
                                                                   % (probe.human_bytes(size), probe.human_bytes(min(sizes)),
                                                                      probe.human_bytes(max(sizes))), "")])
    flags = set((fs.get("super_options") or []) + (fs.get("mount_options") or []))
    if "sync" in flags and "Fsync" in values:
        # -o sync makes every write(2) synchronous (O_SYNC): as if each write were followed by fsync
        every = [level for level in values["Fsync"] if all(level)]
        if every:
            own["Fsync"] = (every[0], [(mountpoint, "host"), (" is mounted sync", "")])
    return own, outside


def _level_values(sweep):
    try:
        return probe.levels(sweep.get("level_set") or "short")
    except probe.ProbeError:  # a level set this version does not know: nothing to place
        return {}


def own_levels(report):
    """{factor: level label} of the host's own configuration, where its facts imply one."""
    section = report.get("probe") or {}
    own, _ = _own_levels(report, section, _level_values(section.get("sweep") or {}))
    return dict((factor, probe.level_label(factor, value)) for factor, (value, _) in own.items())


def tail_sentences(report, section):
    """Whether the host's own configuration is in the tail region of the sweep: for each factor
    whose level the host's facts imply, the share of that level's runs in the tail against the
    share of all runs, tested (exact binomial) against chance."""
    sweep = section.get("sweep") or {}
    mapping = sweep.get("mapping")
    if not sweep or not section.get("mountpoint"):
        return []
    if not mapping or not sweep.get("runs_completed"):
        return [[("Whether your configuration is in the tail region cannot be told: the sweep has no tail map "
                  "(too few runs).", "")]]
    own, out = _own_levels(report, section, _level_values(sweep))
    overall = mapping["tail_runs"] / sweep["runs_completed"]
    for factor, (value, source) in own.items():
        entry = mapping["factors"].get(factor, {}).get(probe.level_label(factor, value))
        if not entry or not 0 < overall < 1:
            continue
        hits = int(round(entry["tail_share"] * entry["runs"]))
        if entry["tail_share"] > overall and _binomial_tail(hits, entry["runs"], overall, True) < TAIL_ALPHA:
            verdict, against = "is in the tail region", "more than chance explains"
        elif entry["tail_share"] < overall and _binomial_tail(hits, entry["runs"], overall, False) < TAIL_ALPHA:
            verdict, against = "is clear of the tail", "fewer than chance explains"
        else:
            verdict, against = "is not in the tail region", "within chance"
        out.append([("Your %s (%s: " % (probe.factor_title(factor), probe.level_name(factor, value)), "")] + source +
                   [(") %s: %s of the %d runs at that level ended in the tail (d-span at or above %s), against %s "
                     "of all runs, %s." % (verdict, percent(entry["tail_share"]), entry["runs"],
                                           probe.human_bytes(mapping["threshold"]), percent(overall), against), "")])
    rest = [probe.factor_title(name) for name in probe.factor_names()
            if name not in own and len(mapping["factors"].get(name) or {}) > 1]
    if rest:
        head = "The other factors" if own else "Whether your configuration is in the tail region cannot be " \
                                               "inferred: the sweep's factors"
        out.append([("%s (%s) depend on the applications' writes and the filesystem's history: the host's facts "
                     "do not tell their levels." % (head, ", ".join(rest)), "")])
    return out


def sentences(report):
    """The sentences that open a host's probe section (empty when the probe did not run: the
    section's status line says why)."""
    section = report.get("probe")
    if not section or section.get("status") != "ran":
        return allocator_sentences(section or {})
    return confirmation_sentences(report) + allocator_sentences(section) + tail_sentences(report, section)


def text(sentence, escape=str, code=lambda value: value):
    """A sentence as one string: host parts through `escape`, identifiers through `code`."""
    return "".join(code(value) if kind == "code" else value if kind == "" else escape(value)
                   for value, kind in sentence)

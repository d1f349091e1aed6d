"""The probe's controller side: the seeded plan, the analysis of a sweep, and what the probe
adds to a host report.

    make_plan() -> probe/plan.json -> target (roles/chopper_probe: one sweep per host)
    -> probe/<host>.json -> host_section() (analyze(): Chopper's d-span analysis) and
    confirm() (a finding's measured confirmation, which may escalate it)

The plan is Chopper's (He et al., FAST '15; ../shared/research/chopper.md sections 1, 2, 6):
a Latin hypercube over 12 factors whose levels are data (factors.yml), made once on the
controller, so every host and kernel plays the same treatments.
"""

import collections.abc
import functools
import hashlib
import importlib.metadata
import itertools
import json
import math
import os

import numpy as np

from ext4audit import severity_rank
from ext4audit.model import contract, safe_yaml

PLAN_SCHEMA = contract.PROBE_PLAN_SCHEMA
RESULT_SCHEMA = contract.PROBE_RESULT_SCHEMA
FACTORS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "factors.yml")
# The default seed is fixed (FAST '15 opened on 2015-02-16), so plans made on different days,
# for different hosts or kernels, are the same plan and compare treatment by treatment.
DEFAULT_SEED = 20150216
DEFAULT_RUNS = 256
MIN_RUNS = 8          # below this, factor analysis is noise: quantiles only
TAIL_QUANTILE = 0.9   # Chopper's tail threshold (fig-5.tail-distribution.r)
MAX_LISTED_LEVELS = 100000  # a plan lists every level of every factor; more is a mistake
RECORD_STATUSES = contract.PROBE_STATUSES  # of a host's probe record
FAILED = ("refused", "failed", "unreachable")  # the probe was meant to run and did not
# The probe's diagnosis of Chopper's four allocator issues (ext4_probe/allocator.py Allocator; docs/probe.md).
ALLOCATOR_ISSUES = {"scheduler_dependency": "Scheduler Dependency", "special_end": "Special End",
                    "shared_global": "Shared Global", "normalization": "Normalization"}


class ProbeError(ValueError):
    """A level set, plan or probe record that cannot be used; the message says why."""


# ------------------------------------------------------------------ factor levels
class _Lazy(collections.abc.Sequence):
    """Generated levels, computed one at a time: permutations of n chunks number n!."""

    def __init__(self, count, nth):
        self._count, self._nth = count, nth

    def __len__(self):
        return self._count

    def __getitem__(self, index):
        if not 0 <= index < self._count:
            raise IndexError(index)
        return self._nth(index)


def _permutation(n, index):
    """The index-th permutation of range(n) in itertools.permutations (lexicographic) order,
    read off the factorial number system."""
    pool, order = list(range(n)), []
    for k in range(n, 0, -1):
        position, index = divmod(index, math.factorial(k - 1))
        order.append(pool.pop(position))
    return order


def _bitmap(n, index):
    """The index-th of itertools.product([False, True], repeat=n): index's bits, first bit highest."""
    return [bool(index >> (n - 1 - k) & 1) for k in range(n)]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _ints(values, where):
    if not all(_is_int(v) for v in values):
        raise ProbeError("%s: %r must be integers" % (where, values))


def _levels(spec, where):
    if isinstance(spec, list):
        levels = spec
    elif isinstance(spec, dict) and "range" in spec and set(spec) <= {"range", "scale"}:
        if not isinstance(spec["range"], list) or len(spec["range"]) != 3:
            raise ProbeError("%s: range needs [start, stop, step]" % where)
        _ints(spec["range"] + [spec.get("scale", 1)], where)
        steps, scale = range(*spec["range"]), spec.get("scale", 1)
        levels = _Lazy(len(steps), lambda i: steps[i] * scale)
    elif isinstance(spec, dict) and set(spec) == {"permutations"}:
        n = spec["permutations"]
        _ints([n], where)
        levels = _Lazy(math.factorial(n), lambda i: _permutation(n, i))
    elif isinstance(spec, dict) and "bitmaps" in spec and set(spec) <= {"bitmaps", "append"}:
        n, tail = spec["bitmaps"], [spec["append"]] if "append" in spec else []
        _ints([n], where)
        levels = _Lazy(2 ** n, lambda i: _bitmap(n, i) + tail)
    else:
        raise ProbeError("%s: %r is neither a list of levels nor one of the generators "
                         "range, permutations, bitmaps" % (where, spec))
    if len(levels) == 0:
        raise ProbeError("%s has no levels" % where)
    return levels


@functools.lru_cache(maxsize=None)
def _factor_file():
    try:
        doc = safe_yaml.load(FACTORS_FILE)
    except (OSError, safe_yaml.Error, ValueError, RecursionError) as exc:
        raise ProbeError("cannot read %s: %s" % (FACTORS_FILE, exc))
    if not isinstance(doc, dict) or not {"factors", "bytes", "titles", "level_sets"} <= set(doc):
        raise ProbeError("%s needs factors, bytes, titles and level_sets" % FACTORS_FILE)
    return doc


def factor_names():
    """The factors in plan column order."""
    return list(_factor_file()["factors"])


def _set_spec(name):
    sets = _factor_file()["level_sets"]
    if name not in sets:
        raise ProbeError("unknown level set %r (factors.yml has %s)" % (name, ", ".join(sorted(sets))))
    spec = dict(sets[name])
    parent = spec.pop("inherit", None)
    return dict(_set_spec(parent), **spec) if parent else spec


def levels(level_set="short"):
    """{factor: levels} of a level set, in plan column order; generated levels index lazily."""
    spec = _set_spec(level_set)
    unknown = set(spec) - set(factor_names())
    if unknown:
        raise ProbeError("level set %s names unknown factors: %s" % (level_set, ", ".join(sorted(unknown))))
    missing = [name for name in factor_names() if name not in spec]
    if missing:
        raise ProbeError("level set %s has no levels for %s" % (level_set, ", ".join(missing)))
    result = dict((name, _levels(spec[name], "%s.%s" % (level_set, name))) for name in factor_names())
    # ChunkOrder, Fsync and Sync hold one entry per chunk, so the chunk count cannot vary.
    if len(result["ChunkCount"]) != 1:
        raise ProbeError("level set %s: ChunkCount must have exactly one level" % level_set)
    for name in ("ChunkOrder", "Fsync", "Sync"):
        if len(result[name][0]) != result["ChunkCount"][0]:
            raise ProbeError("level set %s: %s levels have %d entries for %d chunks"
                             % (level_set, name, len(result[name][0]), result["ChunkCount"][0]))
    return result


def human_bytes(value):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return "%.4g %s" % (value / size, unit)
    return "%.4g B" % value


def level_label(factor, value):
    """A level as people read it: bytes in KiB/MiB/GiB, bitmaps as 0/1 strings (the paper's
    "1***"), chunk orders as lists."""
    if factor in _factor_file()["bytes"]:
        return human_bytes(value)
    if isinstance(value, list) and value and all(isinstance(v, bool) for v in value):
        return "".join("1" if v else "0" for v in value)
    if isinstance(value, list):
        return "[%s]" % ", ".join(str(v) for v in value)
    return "%g" % value if isinstance(value, float) else str(value)


def factor_title(factor):
    """What a factor is, in plain words (factors.yml titles): "fsync pattern" for Fsync."""
    return _factor_file()["titles"].get(factor, factor)


def _writes(bits):
    """The writes (numbered from 1, in write order) a bitmap marks, in words."""
    marked = [str(k + 1) for k, bit in enumerate(bits) if bit]
    if len(marked) == len(bits):
        return "every write"
    if marked == [str(len(bits))]:
        return "the last write"
    if len(marked) == 1:
        return "write " + marked[0]
    return "writes %s and %s" % (", ".join(marked[:-1]), marked[-1])


def level_name(factor, value):
    """A level named by what it means, for people reading a report: "fsync after writes 2 and 4"
    where level_label says 0101, "order 3-1-0-2" for a chunk order, sizes with units. The
    Fsync and Sync bitmaps apply in write order (the k-th write, not chunk k), as the probe
    plays them."""
    if factor in _factor_file()["bytes"]:
        return human_bytes(value)
    if factor == "ChunkOrder":
        return "order " + "-".join(str(v) for v in value)
    if factor == "Fsync":
        return "fsync after " + _writes(value) if any(value) else "no fsync"
    if factor == "Sync":
        return "close + sync after " + _writes(value) if any(value) else "no close + sync"
    if factor == "UsedRatio":
        return "%g%% used" % (100 * value)
    if factor == "FreeSpaceLayout":  # Chopper's layouts 1-5 punch lognormal holes; 6 punches none
        return "not fragmented" if value == 6 else "fragmented (layout %d)" % value
    if factor == "InternalDensity":  # above 1, a second pass overwrites part of each chunk
        return "%g%% written%s" % (100 * value, " (holes)" if value < 1 else " (overwrites)" if value > 1 else "")
    units = {"CPUCount": "CPU", "FileCount": "file", "ChunkCount": "chunk"}
    if factor in units:
        return "%d %s%s" % (value, units[factor], "" if value == 1 else "s")
    if factor == "DirectorySpan":
        return "span %d" % value
    return level_label(factor, value)


def level_names(level_set):
    """{factor: {level_label: level_name}} of a level set: how a sweep's tail map (keyed by
    level_label) is shown."""
    return dict((name, dict((level_label(name, v), level_name(name, v)) for v in values))
                for name, values in levels(level_set).items())


# ------------------------------------------------------------------ the plan
def lhs_centres(seed, runs, dims):
    """scipy.stats.qmc.LatinHypercube(d=dims, scramble=False, rng=seed).random(runs), the same
    numbers drawn the same way, without importing scipy (0.6 s of every `make audit`). As scipy
    1.17 does: the engine's Generator is the first child spawned from default_rng(seed)'s seed
    sequence; each dimension's stratum order is shuffled in turn; unscrambled, each point sits
    at the centre of its stratum (stratum k of n is [(k-1)/n, k/n))."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    strata = np.tile(np.arange(1, runs + 1), (dims, 1))
    for row in strata:
        rng.shuffle(row)
    return (strata.T - 0.5) / runs


def make_plan(seed=DEFAULT_SEED, runs=DEFAULT_RUNS, level_set="short"):
    """A seeded Latin hypercube plan: the same seed, runs and level set give the same plan,
    byte for byte the one scipy's unscrambled LatinHypercube gave (tests/unit/test_probe_controller.py).
    Each row of the unit hypercube becomes a treatment by Chopper's pick_by_level:
    level index = floor(u * n), clamped to n - 1."""
    if not _is_int(seed) or seed < 0:
        raise ProbeError("seed must be a non-negative integer, got %r" % (seed,))
    if not _is_int(runs) or runs < 1:
        raise ProbeError("runs must be a positive integer, got %r" % (runs,))
    factors = levels(level_set)
    for name, values in factors.items():
        if len(values) > MAX_LISTED_LEVELS:
            raise ProbeError("%s has %d levels in level set %s: too many to list in a plan"
                             % (name, len(values), level_set))
    # Unscrambled, each point is at the centre of its stratum. With the floor mapping every
    # level then gets floor(runs/n) or ceil(runs/n) runs; random positions inside the strata
    # (Chopper's randomLHS) move points across level edges: counts up to 3 apart at 256 runs.
    sample = lhs_centres(seed, runs, len(factors))
    treatments = []
    for number, row in enumerate(sample):
        treatment = {"id": number}
        for (name, values), u in zip(factors.items(), row):
            treatment[name] = values[min(int(u * len(values)), len(values) - 1)]
        treatments.append(treatment)
    return {"schema": PLAN_SCHEMA, "seed": seed, "runs": runs, "level_set": level_set,
            "factors": dict((name, list(values)) for name, values in factors.items()),
            "treatments": treatments}


def plan_cache_prefix():
    """Where the roles keep the plans this code makes (they add the seed, runs and level set):
    the user's cache folder, and a digest of all a plan depends on besides its arguments (this
    file, the level sets, the plan schema and numpy's generator), so a changed code never reuses
    a plan made by another."""
    digest = hashlib.sha256()
    for path in (os.path.abspath(__file__), FACTORS_FILE):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    digest.update(("%s numpy %s" % (PLAN_SCHEMA, importlib.metadata.version("numpy"))).encode("utf-8"))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "ext4audit", "plans", digest.hexdigest()[:24])


# ------------------------------------------------------------------ the analysis
def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _quantiles(values):
    if len(values) == 0:
        return {"p50": None, "p90": None, "p99": None}
    # numpy's default (linear) is R's type 7, what Chopper's quantile() calls used.
    p50, p90, p99 = np.quantile(values, [0.5, 0.9, 0.99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}


def _key(value):
    """A hashable, comparable form of a level (chunk orders and bitmaps are lists)."""
    return json.dumps(value)


def analyze(plan, result):
    """Chopper's analysis of one sweep, on the completed runs paired to the plan by id.

    Y is a run's `dspan`: the largest d-span of its files (Chopper's max.dspan). Returns the
    d-span quantiles, those of dspan/ideal, factor prioritization (S_i), factor mapping of the
    tail (runs at or above the 90th percentile), the three strongest two-factor interactions,
    and notes on what could not be computed.
    """
    treatments = dict((t["id"], t) for t in plan["treatments"])
    runs, seen, ignored = [], set(), 0
    for run in (result.get("sweep") or {}).get("runs") or []:
        usable = (isinstance(run, dict) and _is_int(run.get("id")) and run["id"] in treatments
                  and run["id"] not in seen and _number(run.get("dspan")) and _number(run.get("ideal"))
                  and run["ideal"] > 0)
        if usable:
            runs.append(run)
            seen.add(run["id"])
        else:
            ignored += 1
    y = np.array([r["dspan"] for r in runs], dtype=float)
    out = {"runs_planned": len(treatments), "runs_completed": len(runs), "dspan": _quantiles(y),
           "tail_vs_ideal": _quantiles(y / np.array([r["ideal"] for r in runs], dtype=float)),
           "prioritization": [], "mapping": None, "interactions": [], "notes": []}
    if ignored:
        out["notes"].append("%d run entries ignored: not in the plan, repeated, or without a d-span and "
                            "ideal" % ignored)
    if len(runs) < MIN_RUNS:
        out["notes"].append("%d completed run(s): too few for factor analysis (it needs %d); quantiles only"
                            % (len(runs), MIN_RUNS))
        return out

    names = [name for name in factor_names() if name in plan["factors"]]
    keys = dict((name, np.array([_key(treatments[r["id"]][name]) for r in runs])) for name in names)
    codes = dict((name, np.unique(keys[name], return_inverse=True)[1]) for name in names)
    count = len(runs)
    flat = np.ptp(y) == 0
    if flat:
        out["notes"].append("every run has the same d-span (Var(Y) = 0): no factor explains anything, "
                            "every S is 0, and every run is at the tail threshold")

    def share(groups):
        """Var(E[Y | groups]) / Var(Y), the level means weighted by their run counts: the
        paper's first-order index. Chopper's R code (fig-4.variance.r) instead took the
        unweighted variance of the level means and divided by the sum over factors, not Var(Y)
        (chopper.md section 6), so its bars are shares of the summed main effects."""
        if flat:
            return 0.0
        sizes, sums = np.bincount(groups), np.bincount(groups, weights=y)
        used = sizes > 0
        between = np.sum(sizes[used] * (sums[used] / sizes[used] - y.mean()) ** 2) / count
        return float(between / y.var())

    # noise_floor: what S averages when Y does not depend on the grouping at all, (groups - 1) /
    # (runs - 1); a factor (or pair of factors) with many levels and few runs per level scores
    # about that much by chance.
    varied = [name for name in names if codes[name].max() > 0]
    main = dict((name, {"factor": name, "s": share(codes[name]), "levels": int(codes[name].max()) + 1})
                for name in varied)
    for entry in main.values():
        entry["noise_floor"] = (entry["levels"] - 1) / (count - 1)
    out["prioritization"] = sorted(main.values(), key=lambda e: -e["s"])

    pairs = []
    for a, b in itertools.combinations(varied, 2):
        cells = codes[a] * (codes[b].max() + 1) + codes[b]
        filled = len(np.unique(cells))
        pairs.append({"factors": [a, b], "s": share(cells) - main[a]["s"] - main[b]["s"], "cells": filled,
                      "noise_floor": (filled - main[a]["levels"] - main[b]["levels"] + 1) / (count - 1)})
    # ranked by how far S_ij stands above what chance gives a pair with that many cells: raw S_ij
    # would always crown the pairs with the most (and emptiest) cells
    out["interactions"] = sorted(pairs, key=lambda e: -(e["s"] - e["noise_floor"]))[:3]
    if any(e["cells"] * 2 > count for e in out["interactions"]):
        out["notes"].append("the strongest two-factor terms have fewer than 2 runs per cell: their S is "
                            "mostly chance (compare with noise_floor)")

    threshold = float(np.quantile(y, TAIL_QUANTILE))
    tail = y >= threshold
    mapping = {"threshold": threshold, "tail_runs": int(tail.sum()), "factors": {}}
    for name in names:
        by_level = mapping["factors"][name] = {}
        for value in plan["factors"][name]:
            hit = keys[name] == _key(value)
            if hit.any():
                by_level[level_label(name, value)] = {"runs": int(hit.sum()), "tail_share": float(tail[hit].mean())}
    out["mapping"] = mapping
    return out


# ------------------------------------------------------------------ records and reports
def check_plan(plan, where="plan"):
    """Raise ContractError or ProbeError unless `plan` is a plan as make_plan() writes it (contract.ProbePlan, and
    a level of every factor in each treatment, ids unique)."""
    contract.check(plan, contract.ProbePlan, where)
    factors = plan["factors"]
    for number, treatment in enumerate(plan["treatments"]):
        if not _is_int(treatment.get("id")) or not set(factors) <= set(treatment):
            raise ProbeError("%s: $.treatments[%d] has no integer id or not a level of every factor" % (where, number))
    if len(set(t["id"] for t in plan["treatments"])) != len(plan["treatments"]):
        raise ProbeError("%s: treatment ids repeat" % where)


def check_record(record, where="probe record"):
    """Raise ContractError or ProbeError unless `record` is what the playbook writes to probe/<host>.json:
    contract.ProbeRecord, with a result when the probe ran."""
    contract.check(record, contract.ProbeRecord, where)
    if record["status"] in ("ran", "partial") and record.get("result") is None:
        raise ProbeError("%s (host %r): status is %s but there is no result" % (where, record["host"], record["status"]))
    allocator = (record.get("result") or {}).get("allocator") or {}
    for number, entry in enumerate(allocator.get("issues") or ()):
        if ALLOCATOR_ISSUES.get(entry["id"]) != entry["name"]:
            raise ProbeError("%s (host %r): $.result.allocator.issues[%d]: %r named %r is not one of the four issues"
                             % (where, record["host"], number, entry["id"], entry["name"]))



def host_section(record, plan):
    """The host report's `probe` section from the host's record and the run's plan (plan None:
    the run folder has none, and the sweep is reported as not analysed).

    A refused, failed or unreachable probe (status and reason here) is also one of the host's
    errors (the caller adds it) and is listed in summary.json, but does not change the verdict by
    itself: the static audit decides; the probe only confirms (and may escalate) its findings.
    """
    result = record.get("result") or {}
    errors = []  # what went wrong beyond the status (a failed or refused probe says why in `reason`)
    section = {"status": record["status"], "reason": record.get("reason") or result.get("reason"),
               "mountpoint": record.get("mountpoint"), "kernel": result.get("kernel"),
               "duration_s": result.get("duration_s"), "replica": result.get("replica"), "sweep": None,
               "allocator": result.get("allocator"),
               "confirmations": result.get("confirmations") or [], "errors": errors}
    sweep = result.get("sweep")
    if sweep is not None:
        errors.extend("sweep: %s" % error for error in sweep.get("errors") or [])
        if plan is None:
            errors.append("sweep not analysed: the run folder has no probe plan")
        else:
            section["sweep"] = dict(analyze(plan, result), seed=plan.get("seed"), level_set=plan.get("level_set"),
                                    **dict((key, sweep.get(key)) for key in
                                           ("stopped_by", "images_built", "images_seconds", "runs_seconds")))
    if (section["allocator"] or {}).get("status") == "error":
        errors.append("allocator: %s" % (section["allocator"]["reason"] or "no reason given"))
    errors.extend("confirmation %s: %s" % (entry["id"], entry.get("reason") or "no reason given")
                  for entry in section["confirmations"] if entry.get("status") == "error")
    return section


def _measurement(section, probe_id, scope, mountpoint):
    """(the probe's measured entry for a finding, None) or (None, why there is none)."""
    if section is None:
        return None, "no probe record for this host"
    if section["status"] != "ran":  # a partial probe confirms nothing: its measurements are not the plan's
        return None, "probe %s: %s" % (section["status"], section["reason"] or "no reason given")
    if scope == "filesystem" and mountpoint != section["mountpoint"]:
        return None, "the probe replicated %s, not this filesystem" % section["mountpoint"]
    entries = [e for e in section["confirmations"] if e["id"] == probe_id
               and (scope != "netfs" or e.get("mountpoint") == mountpoint)]
    if not entries:
        return None, "the probe reported no %s measurement%s" % (probe_id, " of this mount" if scope == "netfs" else "")
    if entries[0].get("status") != "measured" or entries[0].get("ratio") is None:
        return None, "%s %s: %s" % (probe_id, entries[0].get("status"), entries[0].get("reason") or "no ratio")
    return entries[0], None


def confirm(findings, section, rules):
    """Give each finding whose rule has a `confirmation` what the probe measured for it, and
    escalate confirmed ones as the rule says (like the catalog's `escalate`: the rule's level
    stays in base_severity, the reason is added to escalated_because).

    section: the host's probe section, None when the host has no probe record. Every such
    finding gets a status: confirmed (ratio >= confirmed_at), not_reproduced, or not_measured
    with the reason.
    """
    for finding in findings:
        rule = rules[finding["rule"]]
        spec = rule.get("confirmation")
        if not spec:
            continue
        entry, reason = _measurement(section, spec["probe"], rule["scope"], finding["mountpoint"])
        probed = (entry or {}).get("mountpoint") if rule["scope"] == "netfs" else (section or {}).get("mountpoint")
        confirmation = {"probe": spec["probe"], "status": "not_measured", "ratio": None, "spread": None,
                        "threshold": spec["confirmed_at"], "probed_mountpoint": probed, "metric": None,
                        "reason": reason}
        finding["confirmation"] = confirmation
        if entry is None:
            continue
        confirmed = entry["ratio"] >= spec["confirmed_at"]
        confirmation.update(status="confirmed" if confirmed else "not_reproduced", ratio=entry["ratio"],
                            spread=entry.get("ratio_spread"), metric=entry.get("metric"))
        if confirmed and severity_rank(spec["escalate_to"]) > severity_rank(finding["severity"]):
            because = ("the probe measured %s at %.3g times the safe option set's on this host's kernel "
                       "(confirmed at %g)" % (entry.get("metric") or "the cost", entry["ratio"], spec["confirmed_at"]))
            finding["severity"] = spec["escalate_to"]
            finding["escalated_because"] = "; ".join(filter(None, [finding.get("escalated_because"), because]))

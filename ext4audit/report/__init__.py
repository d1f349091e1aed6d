"""The report step: over a fleet's facts records, in worker processes (fleet.py), each host's report
and verdict (reports.py), the writers of every format (writers.py), the baseline diff
(baseline.py), the merge of sliced runs (merge.py) and the kernel upgrade gate (kernel_gate.py).

Data flows: run folder's facts/ -> rules -> hosts/*.json + every format + summary.json -> store/.
"""

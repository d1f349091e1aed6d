"""The probe's controller side: the Latin hypercube plan and the analysis of the probe's results
(analysis.py, factors.yml), the report sentences its findings carry (sentences.py) and the
pictures (plots.py). The probe itself runs on the hosts (roles/chopper_probe).

Data flows: factors.yml -> plan.json -> (hosts) -> probe records -> findings. Imports model/, rules/.
"""

# The two commands of the README: `make audit` (audit this machine) and `make test`.
# Both set up what they need first: Debian packages (as root) and ./.venv from requirements.txt
# (what the audit needs); `make test` adds requirements-dev.txt. constraints.txt pins the versions.
SHELL := /bin/bash
VENV := .venv
PYTHON ?= python3
# e2fsprogs, util-linux: the audit and the probe (nothing else: `make audit` installs only these).
APT_PACKAGES := e2fsprogs util-linux
APT_COMMANDS := dumpe2fs debugfs losetup
# apt-get that waits up to 5 minutes for another apt (unattended-upgrades on a fresh cloud VM)
# instead of failing at once.
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: schemas collection setup setup-dev deps vm-deps lint-deps test-deps sarif-multitool ansible-cores galaxy-importer cloud-deps audit test lint rules docs role-readmes module-returns clean molecule fleet-up fleet-down vm-up vm-audit vm-down vm-kernel-gate kernel-records e2fsprogs-corpus
setup: deps $(VENV)/.installed

# Debian packages the audit and the tests use; installed only when a tool is missing.
deps:
	@for c in $(APT_COMMANDS); do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then echo "installing $(APT_PACKAGES)"; $(APT_GET) update -q && \
	  $(APT_GET) install -y -q $(APT_PACKAGES); fi

# The audit's packages only (requirements.txt: ansible-core and the controller package's
# requirements, at constraints.txt's versions; pip's own lines show the progress), then the
# controller package (pyproject.toml; its `ext4audit` command is what the roles run), editable:
# the checkout's ext4audit/ is what runs.
PIP_INSTALL = $(VENV)/bin/pip install --disable-pip-version-check -c constraints.txt
$(VENV)/.installed: requirements.txt requirements-controller.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "installing the audit's packages into $(VENV) (requirements.txt)"
	$(PIP_INSTALL) -r requirements.txt
	$(PIP_INSTALL) -q --no-deps -e .
	touch $@

# What the tests, `make lint`, `make docs` and Molecule add: requirements-dev.txt.
setup-dev: setup $(VENV)/.installed-dev
$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	@echo "installing the tests' and tools' packages into $(VENV) (requirements-dev.txt)"
	$(PIP_INSTALL) -r requirements-dev.txt
	touch $@

# The collection ext4audit.fleet (galaxy.yml) as dist/ext4audit-fleet-<version>.tar.gz.
collection: setup
	$(VENV)/bin/ansible-galaxy collection build --force --output-path dist .

# Main job: audit this machine with the embedded inventory. Through `ext4audit run` (ext4audit/cli/run.py, as
# `python -m ext4audit.cli.run`: it imports only what it needs, about 0.8 s less than the `ext4audit` command),
# the exit code is the gate's: 0 pass, 1 policy failed, 2 incomplete or could not run.
audit: setup
	$(VENV)/bin/python -m ext4audit.cli.run -- playbooks/audit.yml $(ARGS)

# Test VMs on real Debian kernels (testhosts/vm/README.md); qemu's recommends are large.
# fdisk: sfdisk makes the partitioned images of the image pre-rollout check's tests.
VM_APT_PACKAGES := qemu-system-x86 qemu-utils debootstrap fdisk
VM_APT_COMMANDS := qemu-system-x86_64 qemu-img debootstrap sfdisk
vm-deps:
	@for c in $(VM_APT_COMMANDS); do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then echo "installing $(VM_APT_PACKAGES)"; $(APT_GET) update -q && \
	  $(APT_GET) install -y -q --no-install-recommends $(VM_APT_PACKAGES); fi

# Lint tools outside the venv (`make lint`, tests/unit/test_workflows.py): shellcheck (actionlint
# checks run: scripts with it) and actionlint, built with Go into the venv (the PyPI wrapper
# downloads a binary at build time, which fails here). actionlint 1.7.12 needs Go >= 1.25; Debian
# 12's golang-go is 1.19, so with no Go toolchain the build is skipped with a message. Go's caches
# go to .cache/go (no dependence on $HOME; removable: -modcacherw).
ACTIONLINT_VERSION := 1.7.12
ACTIONLINT_GO_MIN := 1.25
GO ?= $(firstword $(shell command -v go) $(wildcard /usr/local/go/bin/go))
lint-deps: setup
	@command -v shellcheck >/dev/null || { echo "installing shellcheck"; $(APT_GET) update -q && \
	  $(APT_GET) install -y -q --no-install-recommends shellcheck; }
	@go="$(GO)"; \
	if $(VENV)/bin/actionlint -version 2>/dev/null | grep -qx 'v$(ACTIONLINT_VERSION)'; then exit 0; fi; \
	if [ -z "$$go" ]; then \
	  $(APT_GET) update -q >/dev/null; \
	  candidate=$$(apt-cache policy golang-go | sed -n 's/^ *Candidate: \([0-9]*:\)\{0,1\}\([0-9.]*\).*/\2/p'); \
	  if ! printf '%s\n' $(ACTIONLINT_GO_MIN) "$$candidate" | sort -V -C; then \
	    echo "SKIPPED actionlint: no Go toolchain, and Debian's golang-go ($${candidate:-none}) is older than" \
	         "$(ACTIONLINT_GO_MIN); install Go >= $(ACTIONLINT_GO_MIN) (e.g. /usr/local/go) and run make lint-deps"; \
	    exit 0; fi; \
	  $(APT_GET) install -y -q --no-install-recommends golang-go && go=/usr/bin/go; \
	fi; \
	echo "building actionlint $(ACTIONLINT_VERSION) with $$go"; \
	GOBIN=$(CURDIR)/$(VENV)/bin GOPATH=$(CURDIR)/.cache/go GOCACHE=$(CURDIR)/.cache/go/build GOFLAGS=-modcacherw \
	  "$$go" install github.com/rhysd/actionlint/cmd/actionlint@v$(ACTIONLINT_VERSION)

# Debian packages only the tests use, installed when one of their commands is missing (a new
# package goes in the first list, a command it installs in the second). chromium, chromium-driver:
# the HTML report opened in a real browser. prometheus: its promtool checks and unit-tests
# monitoring/prometheus/ (Debian ships promtool only in the server's package; where systemd runs,
# installing it also starts a Prometheus on :9090). openssh-server, sshfs: the tests' SSH hosts and
# real network mount (not `make audit`: it must not put an SSH server on the machine it audits).
# xfsprogs: a real xfs on a loop device, listed as not audited (tests/integration/test_live_usage.py).
# postgresql: the results store's tests start its server in a throw-away cluster (tests/conftest.py;
# where systemd runs, installing it also starts Debian's own cluster on :5432).
TEST_APT_PACKAGES := chromium chromium-driver prometheus openssh-server sshfs xfsprogs postgresql
TEST_APT_COMMANDS := /usr/bin/chromium /usr/bin/chromedriver /usr/bin/promtool /usr/sbin/sshd sshfs mkfs.xfs /usr/bin/pg_ctlcluster
test-deps: lint-deps sarif-multitool ansible-cores galaxy-importer
	@for c in $(TEST_APT_COMMANDS); do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then echo "installing $(TEST_APT_PACKAGES)"; $(APT_GET) update -q && \
	  $(APT_GET) install -y -q --no-install-recommends $(TEST_APT_PACKAGES); fi

# The ansible-core releases the collection supports besides the project's own (constraints.txt:
# 2.19), oldest to newest on PyPI, each as CORE:PYTHON with a Python that core supports as a
# controller (2.15: 3.9-3.11; 2.16, 2.17: 3.10-3.12; 2.18: 3.11-3.13; 2.20, 2.21: 3.12-3.14), in a
# venv of its own under .cache/ansible-core/<core>. meta/runtime.yml's requires_ansible names the
# oldest (AAP 2.4 and 2.5 execution environments ship 2.15 and 2.16);
# tests/integration/test_ansible_cores.py runs the audit with each and ansible-test sanity with the
# oldest (with the newest when EXT4AUDIT_SANITY_CORES=ends; =all: every core). A Python that is not
# on PATH is looked for among pyenv's versions (these machines keep 3.8 to 3.13 there).
ANSIBLE_CORES := 2.15.13:3.11 2.16.19:3.10 2.17.14:3.12 2.18.19:3.13 2.20.10:3.12 2.21.5:3.13
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions
ansible-cores:
	@for pair in $(ANSIBLE_CORES); do \
	  v=$${pair%%:*}; py=$${pair##*:}; \
	  test -x .cache/ansible-core/$$v/bin/ansible-playbook && continue; \
	  python=$$(command -v python$$py); \
	  "$$python" -c '' 2>/dev/null || python=$$(ls -d $(PYENV_VERSIONS)/$$py.*/bin/python$$py 2>/dev/null | sort -V | tail -1); \
	  test -n "$$python" || { echo "ansible-core $$v needs Python $$py, which is not installed"; exit 1; }; \
	  echo "installing ansible-core $$v with Python $$py into .cache/ansible-core/$$v"; \
	  rm -rf .cache/ansible-core/$$v && "$$python" -m venv .cache/ansible-core/$$v && \
	  .cache/ansible-core/$$v/bin/pip install -q --disable-pip-version-check ansible-core==$$v || exit 1; \
	done

# Galaxy's import check (tests/unit/test_collection_lint.py), in a venv of its own under
# .cache/galaxy-importer: it brings its own ansible-core and ansible-lint.
GALAXY_IMPORTER_VERSION := 0.4.44
galaxy-importer:
	@.cache/galaxy-importer/bin/python -c 'import galaxy_importer' 2>/dev/null && exit 0; \
	echo "installing galaxy-importer $(GALAXY_IMPORTER_VERSION) into .cache/galaxy-importer"; \
	rm -rf .cache/galaxy-importer && $(PYTHON) -m venv .cache/galaxy-importer && \
	.cache/galaxy-importer/bin/pip install -q --disable-pip-version-check galaxy-importer==$(GALAXY_IMPORTER_VERSION)

# Microsoft's SARIF Multitool (npm @microsoft/sarif-multitool-linux: a self-contained Linux build)
# and the SARIF 2.1.0 schema it ships (errata01: suppression.status), in .cache/sarif-multitool:
# tests/unit/test_sarif.py validates report.sarif against that schema and with the Multitool's
# GitHub rules (`validate --rule-kind Gh`). npm checks the package's registry integrity hash.
SARIF_MULTITOOL_VERSION := 5.7.0
SARIF_MULTITOOL_DIR := .cache/sarif-multitool/$(SARIF_MULTITOOL_VERSION)
sarif-multitool:
	@test -x $(SARIF_MULTITOOL_DIR)/package/Sarif.Multitool && exit 0; \
	command -v npm >/dev/null || { echo "installing npm"; $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends npm; }; \
	echo "fetching @microsoft/sarif-multitool-linux@$(SARIF_MULTITOOL_VERSION) (43 MB)"; \
	rm -rf $(SARIF_MULTITOOL_DIR) && mkdir -p $(SARIF_MULTITOOL_DIR) && \
	npm pack --silent --pack-destination $(SARIF_MULTITOOL_DIR) @microsoft/sarif-multitool-linux@$(SARIF_MULTITOOL_VERSION) >/dev/null && \
	tar -xzf $(SARIF_MULTITOOL_DIR)/microsoft-sarif-multitool-linux-$(SARIF_MULTITOOL_VERSION).tgz -C $(SARIF_MULTITOOL_DIR) && \
	chmod 0755 $(SARIF_MULTITOOL_DIR)/package/Sarif.Multitool

# The AMI path of the image pre-rollout check (playbooks/ami_precheck_cloud.yml; never run here):
# boto3 into the venv and the amazon.aws collection of requirements.yml. Not part of `make test`.
BOTO3_VERSION := 1.44.5
cloud-deps: setup
	$(VENV)/bin/pip install -q --disable-pip-version-check boto3==$(BOTO3_VERSION)
	$(VENV)/bin/ansible-galaxy collection install -r requirements.yml

# Unit tests, then the integration tests (root: loop devices and real ansible-playbook runs).
test: setup-dev vm-deps test-deps
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS) tests

# ansible-lint (production profile), yamllint (.yamllint), actionlint (.github/actionlint.yaml) and
# zizmor (.github/zizmor.yml; offline: no GitHub token, so the audits that ask GitHub are skipped).
lint: setup-dev lint-deps
	$(VENV)/bin/ansible-lint --profile production playbooks roles molecule
	$(VENV)/bin/yamllint --strict .
	@test -x $(VENV)/bin/actionlint || { echo "actionlint is missing: it needs Go >= $(ACTIONLINT_GO_MIN) (make lint-deps)"; exit 1; }
	$(VENV)/bin/actionlint -config-file .github/actionlint.yaml .github/workflows/*.yml
	$(VENV)/bin/zizmor --offline --persona=auditor --no-progress .github/workflows

# The Molecule scenarios (root): this machine with risky loop mounts; a loopback SSH fleet of 8
# hosts, one of which goes down mid-run. Molecule runs ansible-config and pytest from PATH.
molecule: setup-dev
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/molecule test -s default
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/molecule test -s fleet

# A loopback SSH fleet to try the audit on: .cache/testhosts/fleet/inventory.yml
fleet-up: setup
	$(VENV)/bin/ansible-playbook playbooks/testhosts/fleet_up.yml $(ARGS)
fleet-down: setup
	$(VENV)/bin/ansible-playbook playbooks/testhosts/fleet_down.yml

# Two VMs (6.1 and 6.12 cloud kernels) on loopback SSH ports; the image is built once and cached.
vm-up: setup vm-deps
	$(VENV)/bin/ansible-playbook playbooks/testhosts/vm_up.yml $(ARGS)
vm-audit: setup
	$(VENV)/bin/ext4audit run -- -i .cache/testhosts/vm/run/inventory playbooks/audit.yml -e ext4_audit_become=false $(ARGS)
vm-down: setup
	$(VENV)/bin/ansible-playbook playbooks/testhosts/vm_down.yml $(ARGS)

# The kernel-upgrade gate on two VMs booting the kernels pinned in testhosts/vm/kernels.yml
# (ports 2241, 2242); the VMs always go down after. Exit 0 only when the gate passed.
# More gate or probe options go after the pins, e.g. KERNEL_GATE_ARGS="-e chopper_probe_runs=128".
KERNEL_GATE_VMS := $(CURDIR)/.cache/testhosts/vm/run-kernel-gate
vm-kernel-gate: setup vm-deps
	$(VENV)/bin/ansible-playbook playbooks/testhosts/vm_up.yml -e @testhosts/vm/kernels.yml -e vm_run_dir=$(KERNEL_GATE_VMS) && \
	  $(VENV)/bin/ansible-playbook -i $(KERNEL_GATE_VMS)/inventory playbooks/kernel_gate.yml -e @testhosts/vm/kernels.yml $(KERNEL_GATE_ARGS); \
	rc=$$?; $(VENV)/bin/ansible-playbook playbooks/testhosts/vm_down.yml -e vm_run_dir=$(KERNEL_GATE_VMS) || rc=1; exit $$rc

# Regenerate rules/kernel_cna_records.json from the kernel CNA's vulns repository: CNA is a work
# tree (git clone https://git.kernel.org/pub/scm/linux/security/vulns.git) or a bare git dir read
# at CNA_REV (default HEAD); CNA_REPO is recorded as the source (default: git.kernel.org's URL).
kernel-records:
	@test -n "$(CNA)" || { echo "usage: make kernel-records CNA=<vulns work tree or git dir> [CNA_REV=master] [CNA_REPO=url]"; exit 2; }
	$(PYTHON) tools/kernel_records.py "$(CNA)" $(if $(CNA_REV),--rev "$(CNA_REV)") $(if $(CNA_REPO),--repository "$(CNA_REPO)")

# e2fsprogs' own test images (tests/*/image{,.gz,.bz2}: the corpus its e2fsck is held to) for
# tests/integration/test_e2fsprogs_corpus.py, into .cache/e2fsprogs/tests (where the test looks unless
# EXT4AUDIT_E2FSPROGS_TESTS says otherwise), with the commit in .cache/e2fsprogs/COMMIT.
# E2FSPROGS_GIT: a git directory of https://github.com/tytso/e2fsprogs (a clone's .git or a bare mirror).
e2fsprogs-corpus:
	@test -n "$(E2FSPROGS_GIT)" || { echo "give E2FSPROGS_GIT=<a git directory of https://github.com/tytso/e2fsprogs>"; exit 2; }
	$(PYTHON) tests/extract_e2fsprogs_corpus.py "$(E2FSPROGS_GIT)" .cache/e2fsprogs

rules: setup
	$(VENV)/bin/python -m ext4audit rules

# schemas/*.json, the JSON Schemas of every record a run writes or reads, from ext4audit/model/contract.py's
# models (tests/unit/test_contract.py checks they are current).
schemas: setup
	$(VENV)/bin/python -c "from ext4audit.model import contract; contract.write_schemas()"

# roles/<role>/README.md from each role's meta/argument_specs.yml (tests/unit/test_docs.py checks them).
role-readmes: setup
	$(VENV)/bin/python tools/role_readme.py

# The superblock fields of ext4_facts' and ext4_image_facts' RETURN blocks, from ext4_parsers.superblock.SUPERBLOCK_FIELDS.
module-returns: setup
	$(VENV)/bin/python tools/module_return.py

# The documentation: antsibull-docs lints the modules' and roles' documentation (as ansible-doc
# reads them), then MkDocs builds README.md and docs/ into .cache/docs/site, failing on a link to
# a missing page or anchor (mkdocs.yml). Links to other sites are not checked (offline). No
# --quiet: it drops the warnings before strict mode counts them, and the build passes. Last, the
# collection's module and role reference: antsibull-docs writes reStructuredText only (MkDocs reads
# Markdown), so docutils turns it into pages of their own in the site's reference/ (links .rst -> .html).
DOCS_RST := .cache/docs/rst
DOCS_REFERENCE := .cache/docs/site/reference
docs: setup-dev
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/antsibull-docs lint-collection-docs --plugin-docs --validate-collection-refs self .
	$(VENV)/bin/mkdocs build
	rm -rf $(DOCS_RST) && mkdir -p $(DOCS_RST) $(DOCS_REFERENCE)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/antsibull-docs collection --use-current --squash-hierarchy \
	  --output-format simplified-rst --dest-dir $(DOCS_RST) ext4audit.fleet
	set -o pipefail; for page in $(DOCS_RST)/*.rst; do name=$$(basename "$$page" .rst); \
	  $(VENV)/bin/rst2html5 --halt=error "$$page" | sed 's/href="\([a-z0-9_]*\)\.rst"/href="\1.html"/g' \
	    > $(DOCS_REFERENCE)/$$name.html || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache

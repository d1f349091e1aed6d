# The two commands of the README: `make audit` (audit this machine) and `make test`.
# Both set up what they need first: Debian packages (as root) and ./.venv from requirements.txt.
SHELL := /bin/bash
VENV := .venv
PYTHON ?= python3
# e2fsprogs, util-linux: the audit and the probe; openssh-server, sshfs: the tests' real network mount.
APT_PACKAGES := e2fsprogs util-linux openssh-server sshfs
APT_COMMANDS := dumpe2fs debugfs losetup /usr/sbin/sshd sshfs
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: setup deps vm-deps audit test lint rules clean molecule fleet-up fleet-down vm-up vm-audit vm-down
setup: deps $(VENV)/.installed

# Debian packages the audit and the tests use; installed only when a tool is missing.
deps:
	@for c in $(APT_COMMANDS); do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then echo "installing $(APT_PACKAGES)"; apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PACKAGES); fi

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

# Main job: audit this machine with the embedded inventory (exit code is the gate's).
audit: setup
	$(VENV)/bin/ansible-playbook playbooks/audit.yml $(ARGS)

# Test VMs on real Debian kernels (testhosts/vm/README.md); qemu's recommends are large.
VM_APT_PACKAGES := qemu-system-x86 qemu-utils debootstrap
VM_APT_COMMANDS := qemu-system-x86_64 qemu-img debootstrap
vm-deps:
	@for c in $(VM_APT_COMMANDS); do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then echo "installing $(VM_APT_PACKAGES)"; apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(VM_APT_PACKAGES); fi

# Unit tests, then the integration tests (root: loop devices and real ansible-playbook runs).
test: setup vm-deps
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS) tests

lint: setup
	$(VENV)/bin/ansible-lint --profile production playbooks roles molecule

# The Molecule scenarios (root): this machine with risky loop mounts; a loopback SSH fleet of 8
# hosts, one of which goes down mid-run. Molecule runs ansible-config and pytest from PATH.
molecule: setup
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
	$(VENV)/bin/ansible-playbook -i .cache/testhosts/vm/run/inventory playbooks/audit.yml -e ext4_audit_become=false $(ARGS)
vm-down: setup
	$(VENV)/bin/ansible-playbook playbooks/testhosts/vm_down.yml $(ARGS)

rules: setup
	$(VENV)/bin/python -m ext4audit rules

clean:
	rm -rf $(VENV) .pytest_cache

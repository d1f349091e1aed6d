# An image build that the ext4 audit gates (docs/image-check.md, "Inside an image build"): Packer
# boots the base image under qemu, its ansible provisioner runs the collection's audit on the build
# VM over SSH, and a verdict other than pass fails the provisioner, so Packer stops the build and
# deletes the output: no image is made. HCL2 as Debian's packer 1.6.6 reads it (HCL2 is beta there).
#
#   packer build -var base_image=disk.raw -var kernel=vmlinuz -var initrd=initrd.img \
#     -var ssh_private_key_file=id_ed25519 -var output_directory=out ext4-audit.pkr.hcl

variable "base_image" {
  type        = string
  description = "The disk image the build starts from (raw or qcow2); Packer copies it, never writes it."
}

variable "kernel" {
  type        = string
  description = "The guest kernel qemu boots directly (the base image has no boot loader of its own)."
}

variable "initrd" {
  type        = string
  description = "The initrd that goes with kernel."
}

variable "kernel_args" {
  type        = string
  description = "Kernel command line; net.ifnames=0 names the NIC eth0 whatever its PCI slot."
  default     = "console=ttyS0 root=/dev/vda rw net.ifnames=0"
}

variable "ssh_private_key_file" {
  type        = string
  description = "A key root on the base image accepts: Packer and the audit log in with it."
}

variable "output_directory" {
  type        = string
  description = "Where the finished image goes (image.qcow2); Packer refuses one that exists."
}

variable "reports_dir" {
  type        = string
  description = "The audit's run folders (ext4_audit_reports_dir), on the machine that runs Packer."
  default     = "reports"
}

variable "accelerator" {
  type        = string
  description = "qemu accelerator: kvm or tcg; empty lets Packer choose (kvm wherever /dev/kvm exists)."
  default     = ""
}

variable "serial_log" {
  type        = string
  description = "Where the guest's serial console goes (a file; the boot is shown nowhere else)."
  default     = "/dev/null"
}

source "qemu" "image" {
  disk_image       = true
  iso_url          = var.base_image
  iso_checksum     = "none" # a local file the pipeline made; pin a sha256 for a downloaded one
  format           = "qcow2"
  skip_compaction  = true # the copy is already compact; compaction rewrites the whole disk
  skip_resize_disk = true # keep the base image's size (Packer's default grows it to 40 GiB)
  output_directory = var.output_directory
  vm_name          = "image.qcow2"
  accelerator      = var.accelerator
  memory           = 1024
  headless         = true
  disk_interface   = "virtio"
  net_device       = "virtio-net"
  qemuargs = [
    ["-kernel", var.kernel],
    ["-initrd", var.initrd],
    ["-append", var.kernel_args],
    ["-serial", "file:${var.serial_log}"],
  ]
  communicator         = "ssh"
  ssh_username         = "root"
  ssh_private_key_file = var.ssh_private_key_file
  ssh_timeout          = "5m"
  shutdown_command     = "poweroff"
}

build {
  sources = ["source.qemu.image"]

  provisioner "ansible" {
    playbook_file = "${path.root}/audit-build.yml"
    # `ext4audit run` in place of ansible-playbook: the build then fails with the gate's own exit
    # code (1 policy failed, 2 incomplete), which Packer prints, not Ansible's 2 for any failed task.
    command            = "${path.root}/ext4audit-run"
    skip_version_check = true # `ext4audit run --version` is not a playbook run with a verdict
    host_alias         = "packer-build"
    user               = "root"
    # Ansible logs in directly with the communicator's key. Packer's proxy adapter offers only an
    # ssh-rsa host key, which OpenSSH 8.8 and later refuse ("no matching host key type found").
    use_proxy = false
    extra_arguments = [
      "-e", "ext4_audit_become=false",
      "-e", "ext4_audit_reports_dir=${var.reports_dir}",
      # A build VM's host key is new each build: nothing to remember in known_hosts. (Not in
      # ansible_ssh_extra_args: 1.6.6 joins its items with no space and quotes them as one.)
      "-e", "ansible_ssh_common_args='-o UserKnownHostsFile=/dev/null'",
    ]
  }
}

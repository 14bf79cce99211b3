#!/usr/bin/env bash
# Stage 2 of the territory guest build (aoe_tui.runtime.image): turn a debootstrapped
# Debian tree into a first-build territory guest (spec §6, guest contract of issue 3).
#   customize.sh ROOTFS BOOTDIR
# ROOTFS is modified in place; the kernel and initrd are copied to BOOTDIR/{vmlinuz,initrd.img}.
# No credential is baked in: root stays locked until the territory's identity is applied
# (QEMU: fw_cfg or kernel command line via aoe-identity.service; containers: the provider
# writes /etc/shadow in the territory's own copy-on-write layer before boot).
set -euo pipefail
ROOT="$1"; BOOT="$2"
[ -d "$ROOT/etc" ] || { echo "customize: $ROOT is not a root filesystem" >&2; exit 2; }

# fstab: the whole virtio disk is one ext4 filesystem (no partition table)
echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' > "$ROOT/etc/fstab"
echo territory > "$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 territory\n::1 localhost ip6-localhost ip6-loopback\n' > "$ROOT/etc/hosts"

# empty machine-id => each guest generates its own on first boot
: > "$ROOT/etc/machine-id"; rm -f "$ROOT/var/lib/dbus/machine-id"

# sshd: root password login (mirrors services.openssh.settings in upstream nix/base.nix)
mkdir -p "$ROOT/etc/ssh/sshd_config.d"
cat > "$ROOT/etc/ssh/sshd_config.d/aoe.conf" <<'C'
PermitRootLogin yes
PasswordAuthentication yes
KbdInteractiveAuthentication no
UseDNS no
PrintMotd no
PrintLastLog no
C
# no motd run-parts per login (slow under TCG)
sed -i 's/^session[[:space:]]\+optional[[:space:]]\+pam_motd.so/# &/' "$ROOT/etc/pam.d/sshd"

# management NIC of QEMU guests: DHCP from slirp (mirrors 20-management in base.nix).
# Container territories get an address on "arena0" from the host; networkd leaves it alone.
mkdir -p "$ROOT/etc/systemd/network"
cat > "$ROOT/etc/systemd/network/20-management.network" <<'C'
[Match]
Name=en*

[Network]
DHCP=ipv4
LinkLocalAddressing=no
C

# the dormant deployment slot (mirrors systemd.services.builder-app in base.nix)
cat > "$ROOT/etc/systemd/system/builder-app.service" <<'C'
[Unit]
Description=Agent-built application slot
After=network.target

[Service]
ExecStart=/usr/bin/python3 /opt/builder/app.py
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
C

# NixOS paths that upstream's arena scripts and oracles rely on (upstream NixOS behaviour, see docs/arena-packages.md):
# /run/current-system/sw/bin/python3 (and the rest of sw/bin) exists at every boot, before
# any arena unit starts (systemd-tmpfiles-setup runs in sysinit.target). /run is tmpfs,
# so the link is made anew at each boot.
mkdir -p "$ROOT/usr/lib/tmpfiles.d"
cat > "$ROOT/usr/lib/tmpfiles.d/aoe-nixos-paths.conf" <<'C'
d /run/current-system 0755 root root -
L /run/current-system/sw - - - - /usr
C
# /tmp survives a reboot on NixOS (no clean-on-boot); Debian's tmp.conf empties it at
# every boot ("D /tmp"): keep the folder, never clean it.
mkdir -p "$ROOT/etc/tmpfiles.d"
echo 'd /tmp 1777 root root -' > "$ROOT/etc/tmpfiles.d/tmp.conf"
# /bin/sh is bash on NixOS (dash on Debian); arena slots run `/bin/sh FILE` on files the
# player writes, so a player's bash-isms behave as they would upstream.
ln -sf bash "$ROOT/usr/bin/sh"

# first-boot identity (QEMU guests): from fw_cfg files opt/aoe/hostname and
# opt/aoe/root_password (kept out of the host's process list), else from the kernel
# command line aoe.hostname= aoe.root_password=.
cat > "$ROOT/usr/local/sbin/aoe-identity" <<'C'
#!/bin/sh
set -eu
set_host() { echo "$1" > /etc/hostname; echo "$1" > /proc/sys/kernel/hostname
             sed -i "s/^127.0.1.1 .*/127.0.1.1 $1/" /etc/hosts; }
set_pw() { printf 'root:%s\n' "$1" | chpasswd -c SHA512 -s 5000; }
modprobe qemu_fw_cfg 2>/dev/null || true
fw=/sys/firmware/qemu_fw_cfg/by_name/opt/aoe
if [ -r "$fw/hostname/raw" ]; then set_host "$(cat "$fw/hostname/raw")"; fi
if [ -r "$fw/root_password/raw" ]; then set_pw "$(cat "$fw/root_password/raw")"; fi
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    aoe.hostname=*) set_host "${arg#aoe.hostname=}" ;;
    aoe.root_password=*) set_pw "${arg#aoe.root_password=}" ;;
  esac
done
mkdir -p /var/lib/aoe; touch /var/lib/aoe/identity-applied
C
chmod 0755 "$ROOT/usr/local/sbin/aoe-identity"
cat > "$ROOT/etc/systemd/system/aoe-identity.service" <<'C'
[Unit]
Description=Apply territory identity (first boot only)
DefaultDependencies=no
After=local-fs.target
Before=ssh.service systemd-user-sessions.service sysinit.target
ConditionPathExists=!/var/lib/aoe/identity-applied

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/aoe-identity

[Install]
WantedBy=sysinit.target
C

# initramfs: only what a virtio disk + ext4 root needs (small, fast to unpack)
sed -i 's/^MODULES=.*/MODULES=list/' "$ROOT/etc/initramfs-tools/initramfs.conf"
printf 'virtio_pci\nvirtio_blk\next4\ncrc32c_generic\n' >> "$ROOT/etc/initramfs-tools/modules"

cleanup() { for m in dev sys proc; do umount "$ROOT/$m" 2>/dev/null || true; done; }
trap cleanup EXIT
mount --bind /proc "$ROOT/proc"; mount --bind /sys "$ROOT/sys"; mount --bind /dev "$ROOT/dev"
chroot "$ROOT" /bin/sh -eu -c '
  passwd -l root >/dev/null
  systemctl enable systemd-networkd.service builder-app.service aoe-identity.service
  systemctl mask systemd-firstboot.service e2scrub_reap.service systemd-binfmt.service dev-hugepages.mount sys-kernel-debug.mount sys-kernel-tracing.mount apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer 2>/dev/null || true
  for v in $(ls /lib/modules); do
    d=/lib/modules/$v/kernel
    rm -rf $d/drivers/gpu $d/drivers/media $d/drivers/net/wireless $d/drivers/infiniband $d/sound $d/drivers/staging $d/drivers/net/ethernet $d/drivers/bluetooth $d/drivers/isdn $d/drivers/iio $d/drivers/hid $d/drivers/usb $d/net/wireless $d/net/mac80211 $d/net/bluetooth
    depmod -a $v
  done
  update-initramfs -u -k all
  apt-get clean
'
cleanup; trap - EXIT
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*
mkdir -p "$BOOT"
cp -L "$ROOT/vmlinuz" "$BOOT/vmlinuz"; cp -L "$ROOT/initrd.img" "$BOOT/initrd.img"

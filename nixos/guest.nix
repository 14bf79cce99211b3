# The first-build territory guest (spec §1.12 / §6; upstream arenas/first-build/nix/base.nix):
# systemd, root password SSH, the tools an agent needs, a dormant builder-app.service slot,
# firewall port 8080, 1 core / 768 MiB / 2048 MiB disk, no graphics.
{ config, lib, pkgs, modulesPath, name, arenaAddress, arenaMac, password, ... }:
{
  imports = [ "${modulesPath}/virtualisation/qemu-vm.nix" ];

  system.stateVersion = "24.05";
  networking.hostName = name;

  virtualisation = {
    cores = 1;
    memorySize = 768;   # MiB
    diskSize = 2048;    # MiB
    graphics = false;
  };

  # Management NIC: the runner's user-mode (slirp) NIC, DHCP (QEMU_NET_OPTS adds the
  # restrict=on + 127.0.0.1 host forwards). Arena NIC: QEMU_OPTS' multicast socket NIC.
  networking.useDHCP = false;
  networking.useNetworkd = true;
  # networkd applies the first matching file: the arena NIC (by MAC) before the catch-all.
  systemd.network.networks."10-arena" = {
    matchConfig.MACAddress = arenaMac;
    address = [ "${arenaAddress}/24" ];
    linkConfig.RequiredForOnline = "no";
  };
  systemd.network.networks."20-management" = {
    matchConfig.Name = "en* eth*";
    networkConfig.DHCP = "ipv4";
    linkConfig.RequiredForOnline = "no";
  };

  services.openssh = {
    enable = true;
    settings = {
      PermitRootLogin = "yes";
      PasswordAuthentication = true;
      KbdInteractiveAuthentication = false;
      UseDns = false;
    };
  };
  users.mutableUsers = false;
  users.users.root.password = password;

  programs.nix-ld.enable = true;
  environment.systemPackages = with pkgs; [ curl jq lsof procps python3 sqlite strace vim ];

  networking.firewall.allowedTCPPorts = [ 22 8080 ];

  # The dormant deployment slot: fails (and hits the start limit) until an agent writes
  # /opt/builder/app.py, exactly like the Debian guest's /etc/systemd/system/builder-app.service.
  systemd.services.builder-app = {
    description = "Agent-built application slot";
    wantedBy = [ "multi-user.target" ];
    after = [ "network.target" ];
    serviceConfig = {
      ExecStart = "${pkgs.python3}/bin/python3 /opt/builder/app.py";
      Restart = "always";
      RestartSec = 1;
    };
  };
}

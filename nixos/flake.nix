{
  # First-build territory guests for the `nixos` provider (aoe match run ... --provider nixos).
  # Same contract as upstream's arenas/first-build flake and as aoe's Debian guest image:
  # one nixosConfigurations.<territory> per seat, each a VM (config.system.build.vm).
  description = "aoe-tui first-build territory guests (NixOS)";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-24.05";

  outputs = { self, nixpkgs }:
    let
      system = "x86_64-linux";
      # Seat order = manifest order (spec §6.2): arena address 10.78.0.(10+i) and the MAC the
      # runner gives the arena NIC, 52:54:00:77:00:<hex(10+i)> (upstream's first-build flake
      # pins 52:54:00:78:00:.., which never matches the runner's NIC; this one does).
      seats = [ "builder-one" "builder-two" "builder-three" ];
      mkTerritory = i: name: nixpkgs.lib.nixosSystem {
        inherit system;
        specialArgs = {
          inherit name;
          arenaAddress = "10.78.0.${toString (10 + i)}";
          arenaMac = "52:54:00:77:00:${nixpkgs.lib.toLower (nixpkgs.lib.fixedWidthString 2 "0" (nixpkgs.lib.toHexString (10 + i)))}";
          password = "${name}-race";
        };
        modules = [ ./guest.nix ];
      };
    in {
      nixosConfigurations = builtins.listToAttrs (nixpkgs.lib.imap0
        (i: name: { inherit name; value = mkTerritory i name; }) seats);
    };
}

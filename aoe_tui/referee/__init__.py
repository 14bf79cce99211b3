"""Referee layer: the build-race rules (tick loop, milestones, reboots, finish, drain), the
verifier runner, the fog leak audit, usage accounting and ``run_heat`` (one heat end to
end). May import ``domain``, ``replay``, ``runtime``, ``agents``. Rules: ``docs/formats.md``
§3, §4, §6.4; layers: ``docs/architecture.md``.
"""

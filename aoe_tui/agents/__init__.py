"""Agents layer: adapters — how an agent is started, what it reports (result, usage
checkpoints, transcript) and the prompt it gets; command adapters, oracle, scripted
builders, opencode. May import ``domain``, ``replay``, ``runtime``. Contract:
``docs/formats.md`` §5; opencode facts: ``docs/opencode.md``; layers: ``docs/architecture.md``.
"""

"""TUI layer: the Textual app, its screens, widgets and pure view-models fed by reduced
state (live heats, replays, seasons). A view: may import every layer but ``commands``.
Upstream's text view it follows: ``docs/formats.md`` §8.2; layers: ``docs/architecture.md``.
"""

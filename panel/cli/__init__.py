"""`ascend-panel`: the panel's command-line client (docs/cli.md).

It talks to a panel over its REST API only and imports nothing from Django or the rest of `panel`, so it
runs on a CI runner or a laptop with httpx and PyYAML installed and no panel settings.
"""

"""The answerer daemon (docs/design/answerer.md): one fresh process (or one POST) per parked call.

`semula-answerer` runs it: config.py reads and checks the settings, daemon.py claims and answers
calls through the service layer, runners.py runs one attempt, signals.py stops it in two stages.
"""

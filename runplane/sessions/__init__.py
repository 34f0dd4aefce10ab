"""Interactive sessions (``docs/sessions.md``): a pod of services run as one ``mode=session``
job, kept alive by keepalives and reaped when idle. The body and its checks
(``body.py``), the pure phase machine (``machine.py``), the store (``repo.py``) and the
views (``view.py``); the actor that drives one is ``runplane/actors/session.py``."""

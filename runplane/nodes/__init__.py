"""Nodes: the machines agents run on.

| module | holds |
|---|---|
| ``facts.py`` | ``NodeFacts``: a node row's facts and overrides, parsed once, one set of defaults |
| ``shape.py`` | the placement shape of a node row, reliability and reputation |
| ``view.py`` | the API view of a node (``GET /v1/nodes``) |
| ``repo.py`` | SQL for the ``nodes`` table (rows come back as :class:`NodeRow`) |
| ``connect.py`` | who an agent's hello identifies (credential, join token, open enrollment) |
| ``enrollment.py`` | join tokens and node credentials |

Pure or store-only: no actors, no HTTP (the node actor is ``runplane/actors/node.py``).
"""

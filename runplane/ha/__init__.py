"""High availability (``RUNPLANE_HA=1``): replicas on one PostgreSQL, one leader at a time.

* ``lease.py``: the leader lease row and its fencing epoch (sync psycopg, one connection);
* ``elector.py``: the trio task that campaigns for the lease, renews it while leading and
  says when it is lost.

The gate in front of the HTTP app (proxying a follower's requests to the leader) lives in
``runplane/http/gate.py``; the replica's life (``runplane serve``) in
``runplane/http/replica.py``. See docs/operations.md "High availability".
"""

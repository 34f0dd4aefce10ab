"""Realtime streams of a running job: chunks a job publishes (through its node agent),
per-stream replay rings, stream tickets, teleop frames back to the job, and the job's
recording. The HTTP side is ``runplane/http/routes/streams.py``; the producer side (the
job and its agent) is ``runplane/agent/streams.py``. See ``docs/streams.md``."""

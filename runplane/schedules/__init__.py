"""Schedules (docs/schedules.md): a job or pipeline body fired on a cron expression or a
fixed interval, as its creator, by the scheduler actor (``runplane/actors/scheduler.py``)."""

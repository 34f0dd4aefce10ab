"""Outgoing signed webhooks: endpoints, deliveries, signing and the retry schedule
(docs/webhooks.md). The dispatcher actor is ``runplane/actors/webhooks.py``; the
service ``runplane/services/webhooks.py``."""

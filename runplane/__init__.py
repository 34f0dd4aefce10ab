"""runplane: a job-orchestration control plane on trio."""

__version__ = "0.1.0"

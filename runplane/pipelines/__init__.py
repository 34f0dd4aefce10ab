"""DAG pipelines (``docs/pipelines.md``): a pipeline run is a set of stages, each a RunSpec
body with ``needs``; its topology is checked before anything runs (``dag.py``), its stages
refer to the jobs of the stages they need (``refs.py``), and a pure state machine
(``machine.py``) decides which stage runs, is skipped or ends the run. The actor that
drives it is ``runplane/actors/pipeline.py``."""

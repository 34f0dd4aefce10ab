"""What vulture (pyproject.toml [tool.vulture]) would call dead but is used by name: response
model fields (the OpenAPI views), pydantic fields, dataclass statistics, werkzeug converter
attributes, context-manager arguments. Add a line only for such a use; dead code goes."""

# ruff: noqa
# mypy: ignore-errors

queued_messages  # variable in runplane/agent/client.py
_.compress_type  # attribute in runplane/artifacts/zipstream.py
logo_url  # variable in runplane/auth/shares.py
accent  # variable in runplane/auth/shares.py
tb  # variable in runplane/client/api.py
since_seq  # variable in runplane/http/mcp/tools.py
expired_at  # variable in runplane/http/openapi/views/
next_cursor  # variable in runplane/http/openapi/views/
subscribable  # variable in runplane/http/openapi/views/
exp  # variable in runplane/http/openapi/views/
clamp_notes  # variable in runplane/http/openapi/views/
not_cancelled  # variable in runplane/http/openapi/views/
next_cursor  # variable in runplane/http/openapi/views/
running_jobs  # variable in runplane/http/openapi/views/
next_cursor  # variable in runplane/http/openapi/views/
update_sent  # variable in runplane/http/openapi/views/
current_version  # variable in runplane/http/openapi/views/
target_version  # variable in runplane/http/openapi/views/
clamp_notes  # variable in runplane/http/openapi/views/
http_status  # variable in runplane/http/openapi/views/
lease_ends_in_ms  # variable in runplane/http/openapi/views/
max_slots  # variable in runplane/http/openapi/views/
joined_at  # variable in runplane/http/openapi/views/
weighted_usage  # variable in runplane/http/openapi/views/
log_truncated  # variable in runplane/http/openapi/views/
ended_at  # variable in runplane/http/openapi/views/
effective_caps  # variable in runplane/http/openapi/views/
next_attempt_at  # variable in runplane/http/openapi/views/
gpu_models  # variable in runplane/http/openapi/views/
reputation  # variable in runplane/http/openapi/views/
regex  # variable in runplane/http/routes/artifacts.py
part_isolating  # variable in runplane/http/routes/artifacts.py
_install  # function in runplane/http/routes/artifacts.py
_._runplane_head  # attribute in runplane/http/serving.py
disk  # variable in runplane/jobs/spec.py
trust  # variable in runplane/jobs/spec.py
cpu_cap  # variable in runplane/nodes/patch.py
ram_cap  # variable in runplane/nodes/patch.py
writer_conn  # variable in runplane/persistence/postgres.py
writer_conn  # variable in runplane/persistence/sqlite.py
exc_type  # variable in runplane/persistence/store.py
tb  # variable in runplane/persistence/store.py
writer_conn  # variable in runplane/persistence/store.py
breakdown  # variable in runplane/placement/explain.py
exc_type  # variable in runplane/runtime/broadcast.py
tb  # variable in runplane/runtime/broadcast.py
cover  # variable in runplane/stacks/models.py
cover  # variable in runplane/stacks/models.py
cover  # variable in runplane/stacks/models.py
badge  # variable in runplane/stacks/models.py
featured  # variable in runplane/stacks/models.py
WEBHOOK  # variable in runplane/webhooks/deliveries.py
make_default_options_response  # Quart calls it for an automatic OPTIONS (runplane/http/app.py)
jsonrpc  # RpcResponse's field in runplane/http/openapi/views/platform.py (read by clients)
max_preempt_grace_sec  # policy axis and setting, read by name (runplane/policy/caps.py AXES)
preemptible_default  # policy axis and setting, read by name (runplane/policy/caps.py AXES)

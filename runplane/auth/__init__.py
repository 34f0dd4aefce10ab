"""Tenancy and identity: principals, roles and scopes, access tokens, users/orgs/login
sessions, the audit trail, and the one auth layer in front of every route.

| module | holds |
|---|---|
| ``principal.py`` | :class:`Principal` (who is calling), the anonymous caller, the admin token |
| ``roles.py`` | scopes, roles and their fixed scope bundles |
| ``tokens.py`` | access tokens ``rpt_``: mint, list, revoke, verify |
| ``identity.py`` | users, orgs, memberships, login tokens ``rpl_``, sessions ``rps_`` |
| ``audit.py`` | the append-only audit trail: ``await audit.record(...)`` |
| ``rules.py`` | the route rule table (every route's requirement) |
| ``hook.py`` | the before-request hook that applies the table; ``current_principal()`` |

See docs/auth.md.
"""

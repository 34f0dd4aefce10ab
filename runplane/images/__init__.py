"""Container images on the server side (docs/containers.md): references (``reference``),
where a registry is reached (``routing``: mirrors, insecure registries, the egress guard),
the registry v2 client (``client``) and an org's registry credentials (``credentials``).
``runplane/services/images.py`` resolves a job's image with them at submit."""

"""A container node's images (``runplane agent --executor container``; docs/containers.md,
"Pulling and the image cache"): pulled by digest with skopeo (``pull.py``), unpacked once
with umoci (``unpack.py``) into a content-addressed cache evicted least-recently-used
under ``--image-cache-gb`` (``store.py``), pinned by the jobs that use them
(``jobimages.py``)."""

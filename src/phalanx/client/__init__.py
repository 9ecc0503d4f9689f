"""The CLI's side of a phalanx server: with ``PHALANX_SERVER`` set, every job verb
goes over HTTP (``http.py``) instead of to a workspace on this machine.

``bundle.py`` packs the local files a spec names (its code snapshot, a pip or
conda file, local inputs) into one archive for ``job create``; ``jobs.py``
holds the verbs; ``logs.py`` follows a job's logs over HTTP.
"""

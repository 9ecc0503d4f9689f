"""The CLI's side of a phalanx server: with ``PHALANX_SERVER`` set, every verb but
``cache`` and ``data convert`` goes over HTTP (``http.py``) instead of to a
workspace on this machine.

``bundle.py`` packs the local files a spec names (its code snapshot, a pip or
conda file, local inputs) into one archive for ``job create``; ``jobs.py``
holds the job verbs; ``logs.py`` follows a job's logs over HTTP.
``datastores.py``, ``data.py``, ``models.py`` and ``targets.py`` hold the other
groups' verbs (the same calls as :mod:`phalanx.service`'s local classes);
``upload.py`` sends local files, ``jobfiles.py`` fetches a job's files.
"""

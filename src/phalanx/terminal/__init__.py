"""What a terminal shows of phalanx: tables and panels of jobs (``render``), a job's
logs streamed as they are written (``stream``), and rank-controlled text made safe to
print (``termsafe``). The CLI and the SDK's ``ml_client.jobs.stream()`` both print
through here, so they print the same; it imports no front end."""

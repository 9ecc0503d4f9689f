"""Start the worker processes of one node, with the environment they expect.

phalanx wraps ``torch.distributed.run`` (torchrun) rather than rewriting it.
For each node of a job the runner starts one launcher::

    python -m torch.distributed.run --nnodes N --nproc-per-node P --node-rank K
        --master-addr A --master-port M --max-restarts 0 --shutdown-timeout S
        --module phalanx.launch.worker -- '<command>'

``--max-restarts 0`` because the platform, not torchrun, owns retries: a
failure of any rank ends the attempt everywhere, and the job's retry policy
decides what follows. Rendezvous is torchrun's *static* one: node K's ranks are
``K*P … K*P+P-1``, the same numbering Azure ML, Kubeflow and Ray use.

Each rank runs :mod:`phalanx.launch.worker`, which starts the user's command
(a shell string, as in Azure ML) with ``bash -c`` and stays as its parent to
record how it ended.

Environment of every worker process
-----------------------------------
===========================  =====================================================
``MASTER_ADDR``              address of node 0, where the rendezvous store runs
``MASTER_PORT``              a free port on node 0, chosen by the runner per attempt
``WORLD_SIZE``               total number of processes: nodes × processes per node
``RANK``                     this process's global rank, ``0 … WORLD_SIZE-1``
``LOCAL_RANK``               rank within the node, ``0 … LOCAL_WORLD_SIZE-1``
``LOCAL_WORLD_SIZE``         processes on this node (``process_count_per_instance``)
``NODE_RANK``                this node's index, ``0 … instance_count-1``
``GROUP_RANK``, ``ROLE_*``,  set by torchrun; ``TORCHELASTIC_ERROR_FILE`` points to
``TORCHELASTIC_*``           a per-rank file (below)
``PHALANX_JOB_NAME``         the job's name
``PHALANX_ATTEMPT``          attempt number, from 1; a retry resumes from checkpoints
``PHALANX_CHECKPOINT_DIR``   the job's checkpoint folder, the same in every attempt
``PHALANX_OUTPUTS_DIR``      the job's outputs folder
``PHALANX_INPUT_<NAME>``     each input's value: a local path (download, ro_mount, local
                             data) or the URI as written (``direct``); name upper-cased
``PHALANX_OUTPUT_<NAME>``    each output's folder
``PHALANX_JOB_DIR``          the job's folder in the workspace (on Ray with ``files:
                             local``, the node's own copy, shipped back as it changes)
``PHALANX_HOME``             the workspace, so ``phalanx.data`` resolves datastore URIs
                             its datastores file lacks (on Ray with ``files: local``, the
                             node's home and cache); not for a walled-off job (below)
``PHALANX_DATASTORES_FILE``  the datastores the job's spec names, credentials resolved
                             (0600, the job's own): what ``open_source`` and a remote
                             ``Checkpointer`` resolve ``azureml://datastores/…`` through
``PYTHONUNBUFFERED=1``       so log lines reach the log files as they are printed
``PHALANX_HEARTBEAT_FILE``   where ``phalanx.train.heartbeat()`` records progress (hang watchdog)
``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``  a failed NCCL collective raises rather than hangs
``MLFLOW_TRACKING_URI``      the node's MLflow endpoint, under the rank
                             (``http://127.0.0.1:<port>/ranks/<r>``; also
                             ``MLFLOW_REGISTRY_URI``): ``mlflow`` logs to the job's run
``MLFLOW_RUN_ID``,           the job's name, and its ``experiment_name``'s id; with
``MLFLOW_EXPERIMENT_ID``     ``MLFLOW_TRACKING_TOKEN`` and the client's settings
                             (:mod:`phalanx.tracking.sidecar`); a spec's own win
``PHALANX_RAY_NODE_ID``      on Ray compute: the Ray node the rank runs on
``GLOO_SOCKET_IFNAME``       on Ray compute with several nodes: the interface holding the
                             node's Ray address, unless already set (Gloo would otherwise
                             use what the host name resolves to, often loopback)
===========================  =====================================================

``distribution: mpi`` starts the ranks with one ``mpirun`` (:mod:`phalanx.launch.mpi`):
Open MPI sets ``OMPI_COMM_WORLD_RANK``, ``…_SIZE``, ``…_LOCAL_RANK``, ``…_LOCAL_SIZE``
and the wrapper derives the torchrun names above from them (``NODE_RANK`` =
rank // local size). ``distribution: tensorflow`` adds ``TF_CONFIG``:
``{"cluster": {"worker": [...], "ps": [...]}, "task": {"type", "index"}}``, rank
``r`` being worker ``r``, then parameter server ``r - worker_count``; the job
ends when every worker has (parameter servers are then stopped).

plus the spec's ``environment_variables``. The working directory is the job's
code snapshot.

The rest of a worker's environment is the supervisor's, with one exception: on a
server started as root, a job runs walled off (:mod:`phalanx.jobs.walls`), as a uid
and gid of its own, and its processes start from a base environment instead
(:mod:`phalanx.launch.account`: ``PATH``, the locale, ``LD_LIBRARY_PATH``, the
frameworks' ``NCCL_*``/``GLOO_*``/``CUDA_*``/``TORCH_*`` and thread settings), with
``HOME`` and ``TMPDIR`` its folder's ``tmp/``, ``USER`` ``phalanx-<uid>``,
``PHALANX_CACHE_DIR`` its own ``cache/`` and no ``PHALANX_HOME``: nothing the
server was started with (``PHALANX_DB``, a datastore's credential variables) reaches
it. Its inputs that are files on the machine are shown read-only in its folder's
``inputs/<name>``.

Logs and failures
-----------------
* Rank ``r``'s stdout and stderr, merged, go to
  ``user_logs/std_log_process_<r>.txt`` (Azure ML's name), through a pipe the
  worker copies from, byte for byte; when each byte was read goes to the
  sidecar ``user_logs/.std_log_process_<r>.times``
  (:mod:`phalanx.launch.logtimes`). The launcher's own output goes to
  ``system_logs/node_<k>.txt``.
* An uncaught Python exception in a worker is written, with its traceback, to
  the rank's error file, in torchelastic's format. Scripts need nothing for
  this; those that use torchelastic's ``@record`` write the same file. Its
  message is ``Type: message``, but a :class:`~phalanx.errors.PhalanxError`
  (one the user can fix, e.g. a checkpoint that did not fit on its disk) is
  its own one line, as the CLI prints it.
* When the command ends, the worker records ``system_logs/attempt_<n>/rank_<r>.json``
  (exit code or signal, times, the error). The runner picks the root cause:
  the failed rank whose error came first, not the ranks that failed because a
  peer went away.
* When any rank fails, torchrun stops the node's other ranks, and the runner
  stops every other node: SIGTERM to each launcher, which passes it to its
  workers' process groups, then SIGKILL to whatever of the job still runs after
  a few seconds.
* A preemption notice (``phalanx job preempt``, or SIGTERM to a launcher) is
  passed to every rank the same way, but the runner then waits up to
  ``retry.preemption_grace`` (torchrun's ``--shutdown-timeout``) for ranks to
  save and exit with :data:`phalanx.exitcodes.PREEMPTED_EXIT_CODE`.
* With ``limits.stall_timeout``, an attempt in which no rank heartbeats or logs
  for that long is a hang: every rank's Python stacks are dumped into its log
  (SIGUSR2 → faulthandler), then the gang is stopped.
"""

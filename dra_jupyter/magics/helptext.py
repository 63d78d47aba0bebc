"""The documentation of ``%dra`` and ``%%dra``: what ``%dra?`` and ``%dra help`` show."""

HELP = """\
Devices (GPUs, MIG slices, TPUs) for this notebook, through Kubernetes DRA.

Load once per kernel with ``%load_ext dra_jupyter``. Every form, with examples:

%dra devices [--table]
    The live device board: every device and MIG partition, its memory, use and holder,
    refreshed every second. ``--table`` returns a plain table instead.

%dra request KEY=VALUE ...
    Hold devices and return the claim; its CUDA_VISIBLE_DEVICES (and friends) are set in
    this kernel.
        %dra request gpu=1
        %dra request gpu=2 memory=80Gi same=pcieRoot timeout=5m
        %dra request mig=3g.71gb
        c = %dra request gpu=1 model=H200 lease=2h      # c is the Claim: c.env, c.release()

%dra status [--all]
    This user's claims (everyone's with --all): devices, state, who holds them, the time
    left on a lease, and what releases them when idle. This kernel's claims come first.

%dra release NAME ... | --all
    Give back claims by name, or all of this user's claims but those of runs (a run's claim
    goes with its run: %dra cancel NAME; one released by name stops its run).

%dra explain KEY=VALUE ... [--verbose]
    Why a request can or cannot be met: now (on which devices), only once others release
    theirs (who holds them), or never on this machine (why).
        %dra explain gpu=9
        %dra explain gpu=4 same=pcieRoot --verbose      # --verbose: the device funnel

%dra usage [--since 7d] [--by user|group|claim|device]
    GPU-hours held over the window, and how much of them the GPUs were active, idle or
    unknown, with energy and the idle share, as a DataFrame (dra.usage()). The service
    shows an admin every user, a user their own.
        %dra usage --since 30d --by group

%dra env
    The environment variables (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES,
    ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, TPU_VISIBLE_CHIPS) of this kernel's claims,
    as a dict.

%dra yaml KEY=VALUE ...
    The ResourceClaim (resource.k8s.io/v1) a request would create, without creating it.
        %dra yaml gpu=2 memory=80Gi same=pcieRoot

%dra runs
    This user's runs (dra.runs()): name, phase, devices, start, end, exit codes, and why.
    Every backend: background runs on one machine; Jobs and bare pods on Kubernetes.

%dra logs NAME [--follow]
    A run's output so far; --follow streams it here until the run ends.

%dra cancel NAME
    Stop a run (terminated, then killed after 10 s) and release its devices.

%dra help
    This text (also: %dra?).

%%dra KEY=VALUE ...
    Run the cell with the devices held for exactly the cell's duration: the claim is made
    before the cell, its environment is set during the cell and put back after, and it is
    released after the cell even when the cell raises or is interrupted.
        %%dra gpu=1 memory=80Gi
        import torch; print(torch.cuda.get_device_name())
    A cell with top-level await cannot run under a cell magic: write
    ``with dra.request(gpu=1) as claim:`` inside it instead.

%%dra run KEY=VALUE ... [image=IMAGE timeout=5m start_timeout=5m lease=2h nodes=N
          queue=QUEUE retries=N wait=true gang_timeout=1h]
    Run the cell's code (python -c) with a new claim; nothing of this kernel (variables,
    imports) goes along. Kubernetes backend: in a pod; waits for kube-scheduler to place it
    (says why not), reports its devices, streams its logs, and releases the claim when it
    ends; with nodes=N or queue=QUEUE (Kueue) a Job of N pods, each with the devices asked
    for, returned at once (retries=N: exit codes retried; wait=true: its logs followed to
    its end; gang_timeout=1h: where the cluster starts the N pods together or not at all,
    the run fails when they could not start within that time, the default). One machine:
    in the background, as your own process holding its own claim (the kernel may restart
    meanwhile); returns the run at once (wait=true: follows it): %dra logs NAME --follow,
    %dra cancel NAME.

Keywords (as in dra.request()):
    gpu=N | gpu=all     GPUs of the inventory's GPU class (NVIDIA or AMD)
    tpu=N               TPU chips
    mig=PROFILE         a MIG device of that profile, e.g. mig=3g.71gb (count=N for more)
    count=N             how many, with mig, selector or device_class
    memory=80Gi         devices with at least this much memory
    model=H200          the product name contains this (case-insensitive)
    selector='CEL'      any CEL selector; quote it when it has spaces:
                        selector='device.attributes["gpu.nvidia.com"].architecture == "Hopper"'
    share=20Gi          a share of a device that allows several allocations
    same=pcieRoot       all devices share this attribute (numaNode, parentUUID, pciBusID, or
                        a fully qualified name); distinct=... for the opposite. In a Job
                        (nodes=N): the devices of each pod; same=zone (region, nvlink, or
                        node:LABEL-KEY) puts all its pods on nodes that share that label
    device_class=NAME   any DeviceClass of the inventory
    alternatives=LIST   a Python list of dicts; the first one that can be met wins:
                        alternatives="[{'gpu': 1, 'model': 'H200'}, {'gpu': 2}]"
    timeout=5m          wait in line this long when the devices are busy (default: fail
                        at once); request and %%dra only
    lease=2h            release after this long; request and %%dra only
    name=NAME           the claim's name (default: <user>-<n>, <user>-cell-<id> for %%dra)
    apply_env=false     do not set the environment in this kernel; request only
    restart=true        then restart this kernel with the devices (on Kubernetes: in a pod
                        of its own that holds them); request only
    join=NAME           on Kubernetes: restart this kernel in a pod that uses the claim NAME
                        that exists (a teammate's, your other notebook's), beside the pods
                        that use it already; no device keyword with it (the claim decides);
                        also --join NAME; request only

Values are split as a shell does, so quotes group words; whole numbers for gpu, tpu and
count, nodes and retries; true or false for wait; durations as 90s, 5m, 1h30m. IPython
expands {expressions} and $names first: ``%dra request gpu={n}``. Tab completes commands,
keywords, device classes, models and MIG profiles of this machine, claim names for release,
and run names for logs and cancel.

User errors (a request that cannot be met, a bad keyword) show one line, not a traceback.
"""

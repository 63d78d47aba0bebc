# JupyterHub on one shared GPU machine, with dra-jupyter's devices in the spawn form.
#
# Run as root (LocalProcessSpawner starts each server as its Unix user), beside the
# shared-machine service (deploy/dra-jupyter.service: its limits per user and group apply):
#
#   pip install dra-jupyter jupyterhub jupyterlab    # one environment for the hub and servers
#   npm install -g configurable-http-proxy           # the proxy JupyterHub runs
#   jupyterhub -f /etc/jupyterhub/jupyterhub_config.py
#
# The form offers, for each GPU model, 1, 2, 4, ... GPUs up to the most one node has, each
# MIG profile, and "No GPU"; each with how many could start now (counted with dra-jupyter's
# allocator on the service's devices and claims), and why not when none can. The server,
# running as the user, claims the chosen devices from the service as it starts: the
# service knows the user by the kernel's credentials, so its per-user limits hold, and a
# refusal fails the spawn with the service's reason. Kernels get CUDA_VISIBLE_DEVICES of the
# claim; stopping the server gives the devices back. The REST API takes the choice too:
#
#   curl -X POST -H "Authorization: token $TOKEN" -d '{"profile": "h200-x2"}' \
#        http://HUB/hub/api/users/alice/server
c = get_config()  # noqa: F821  # (JupyterHub's config loader defines it)

c.JupyterHub.spawner_class = "dra_jupyter.hub.localspawner.DRALocalSpawner"
c.JupyterHub.authenticator_class = "pam"  # the machine's users (the spawner runs them)
c.JupyterHub.bind_url = "http://:8000"
# A user may run more than one server (say, one on 2 GPUs and one with none); each is
# spawned through the form at /hub/spawn/USER/NAME. False: one server per user.
c.JupyterHub.allow_named_servers = True

# The service's socket (default: $DRA_JUPYTER_SOCKET, else /run/dra-jupyter/socket), and how
# it counts (its policy's strategy).
c.DRALocalSpawner.dra_socket = "/run/dra-jupyter/socket"
c.DRALocalSpawner.dra_strategy = "topology"
# The single-user server of the environment that has dra-jupyter (its server extension
# claims the devices; `jupyter server extension list` shows dra_jupyter enabled).
c.Spawner.cmd = ["/opt/jupyter/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"

# Who may choose what, and each choice's lease and idle timeout (slugs: h200-x1, h200-x2,
# ..., mig-3g-71gb-x1, none; shell patterns). Each setting comes from the first rule that
# matches the slug and has it. idle_timeout: the server stops itself after that long
# without activity (idle kernels culled first), which gives its devices back; lease: the
# claim's lease at the service (within its lease_max).
c.DRAProfiles.rules = [
    {"match": "*-x8", "groups": ["ml-admins"]},  # a whole node: only this group
    {"match": "*-x4", "groups": ["ml-admins", "researchers"]},
    {"match": "mig-*", "idle_timeout": "30m", "lease": "8h"},
    {"match": "none", "default": True},  # the form starts on "No GPU"
    {"match": "*", "idle_timeout": "1h", "lease": "8h"},
]


# And/or a test of your own: False leaves the choice out of the user's form (and refuses it
# through the REST API). groups are the user's Unix groups and JupyterHub groups.
def allow(user: str, groups: frozenset[str], choice: object) -> bool:
    return True


c.DRAProfiles.allow = allow

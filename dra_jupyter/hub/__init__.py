"""dra-jupyter for JupyterHub: profiles with live device counts, and KubeSpawner with DRA."""

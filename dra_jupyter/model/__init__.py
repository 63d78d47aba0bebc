"""The ``resource.k8s.io/v1`` object model: typed, validated, pure."""

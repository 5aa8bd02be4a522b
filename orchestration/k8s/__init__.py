"""`vllm-locust k8s`: Kubernetes manifests with the user's run options, and the pods' readiness wait."""

// Package deploy holds what runs onceq in production, beside
// docs/production.md: Dockerfile (the image: the static binary on an empty
// base, as a user that is not root), systemd/ (units for workers, onceq
// serve and the delay service, with example environment files) and
// kubernetes/ (workers as a StatefulSet, onceq serve as a Deployment).
//
// Its tests hold them to the binary: every flag they give is one the
// command accepts, the Kubernetes probes reach /healthz and /readyz where
// the real processes serve them (started on the embedded broker with the
// manifests' arguments), the directories the flags name are writable
// volumes, the supervisors wait longer than the shutdown timeout, nothing
// runs as root, and the Dockerfile's build makes a static binary that runs.
// Where podman is installed, the image itself is built and runs onceq
// demo (TestImage).
package deploy

// Package runtime is a job's life on this host. A lease becomes a Spec,
// rendered (Render) into a transient unit of the runmesh user's systemd
// manager whose process is `podman run --sdnotify=conmon`: systemd owns
// the job, so a unit outlives the agent that started it, and a restarted
// agent finds it again by name. Everything else the agent asks podman
// (pulls, image inspects, the survivor check's container list, the events
// that say a job's container died) goes through podman's bindings to the
// user's podman service (Local). A job's inputs and outputs move through
// presigned URLs, exactly as given (Mover).
package runtime

"""Container engines on a host (docker, podman, iSula): finding them, their images, and the engine
containers the container runtime runs.

`commands` builds each engine's argv (documented flags only, unit-tested per engine), `parse` reads their
answers, `detect` is the inventory's part, `images` pulls, loads and removes images, `lifecycle` starts,
inspects, adopts and stops engine containers, `follow` keeps a container's log in a file.
"""

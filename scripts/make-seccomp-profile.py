#!/usr/bin/env python3
"""Writes seccomp.json, the profile kern-sandbox ships for containers (README "Inside containers
and pods"): Podman's default profile (containers-common's /usr/share/containers/seccomp.json,
which scripts/setup-deps.sh installs with podman) plus exactly what a box needs that it refuses,
measured under Podman + runc: `sethostname` (a box names its own UTS namespace), which the
default allows only with CAP_SYS_ADMIN. The name moves out of the two CAP_SYS_ADMIN rules into a
rule of its own; nothing else changes. __tests__/packaging/container.test.js checks the result.

    python3 scripts/make-seccomp-profile.py [BASE] > seccomp.json
"""
import json
import sys

ADDED = ["sethostname"]
COMMENT = (
    "kern-sandbox: a box names its own UTS namespace (the default allows sethostname only with "
    "CAP_SYS_ADMIN; measured: sethostname: EPERM)"
)


def main() -> None:
    base = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/containers/seccomp.json"
    with open(base) as f:
        profile = json.load(f)
    for rule in profile["syscalls"]:
        gated = "CAP_SYS_ADMIN" in rule.get("includes", {}).get("caps", []) or "CAP_SYS_ADMIN" in rule.get(
            "excludes", {}
        ).get("caps", [])
        if gated:
            rule["names"] = [n for n in rule["names"] if n not in ADDED]
    allow = {"names": ADDED, "action": "SCMP_ACT_ALLOW", "args": [], "comment": COMMENT, "includes": {}, "excludes": {}}
    # Right after the default's main allow list, before the argument- and capability-bound rules.
    profile["syscalls"].insert(2, allow)
    sys.stdout.write(json.dumps(profile, indent="\t") + "\n")


if __name__ == "__main__":
    main()

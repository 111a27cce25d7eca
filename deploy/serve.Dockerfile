# `kern serve` (docs/serve.md) as a container: E2B's API for the E2B SDKs, on a host or in
# deploy/k8s/serve.yaml. The boxes run on their own root filesystem, /opt/box-rootfs (a Python
# image with what E2B's code-interpreter template offers, copied in whole), read-only in every
# box. Run it with the flags of docs/containers.md and the port published:
#   podman run --runtime runc --user 1000 --security-opt seccomp=seccomp.json \
#     --security-opt systempaths=unconfined --cap-drop ALL --security-opt no-new-privileges \
#     --read-only --tmpfs /tmp -e KERN_API_KEYS=... -p 127.0.0.1:49982:49982 kern-serve:1.0.0
FROM python:3.12-slim-bookworm AS box
RUN pip install --no-cache-dir numpy pandas matplotlib ipykernel

FROM node:22-bookworm-slim
WORKDIR /srv/kern
# kern-sandbox and its platform package (the addon and kern): no compiler needed.
RUN npm install --omit=dev --no-audit --no-fund kern-sandbox
COPY --from=box / /opt/box-rootfs
USER node
ENV NODE_ENV=production KERN_HOME=/tmp/kern-sandbox TMPDIR=/tmp
EXPOSE 49982
ENTRYPOINT ["node", "/srv/kern/node_modules/kern-sandbox/bin/kern.js"]
CMD ["serve", "--listen", "0.0.0.0:49982", "--image", "/opt/box-rootfs", "--state-dir", "/tmp/kern-serve"]

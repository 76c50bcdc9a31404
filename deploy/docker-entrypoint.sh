#!/bin/sh
# Elsa tells its peers the address it binds (there is no separate
# advertise address), so in a container it must bind the container's own
# address, not 0.0.0.0: ELSA_BIND if set, else the first address
# `hostname -i` gives.
set -eu
if [ -z "${ELSA_BIND:-}" ]; then
    ELSA_BIND=$(hostname -i | awk '{print $1}')
    export ELSA_BIND
fi
exec /usr/local/bin/elsa "$@"

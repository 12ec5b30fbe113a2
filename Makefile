# The two commands (see README): `make run` serves on 127.0.0.1:8080, `make test` runs every test.
# `make run-cluster`: the same app on a local Redis Cluster (deploy/README.md, "Redis Cluster").
# `make run-sentinel`: the same app on a local master, replica and three sentinels
# (deploy/README.md, "Redis Sentinel").
# `make fuzz`: the parser fuzz targets (fuzz/, cargo-fuzz on stable), FUZZ_SECONDS (30) each;
# fails on a crash (docs/testing.md, "Fuzzing"). Not part of `make test`.
.PHONY: run run-cluster run-sentinel test fuzz bench soak slowloris services services-down services-status services-cluster services-cluster-down services-sentinel services-sentinel-down

run:
	scripts/run.sh

run-cluster:
	scripts/run.sh --cluster

run-sentinel:
	scripts/run.sh --sentinel

test:
	scripts/test.sh

fuzz:
	scripts/fuzz.sh

services:
	@scripts/services.sh up >/dev/null

services-down:
	scripts/services.sh down

bench:
	scripts/bench.sh

# Load under faults, a few minutes (docs/soak.md); not part of `make test`.
soak:
	scripts/soak.sh

# A minute of slowloris against one release instance, measured (docs/soak.md,
# "Slowloris"); the end of `make soak` runs it too. SECKILL_BIN=... for another build.
slowloris:
	scripts/slowloris.sh

services-status:
	scripts/services.sh status

services-cluster:
	@scripts/services.sh cluster-up >/dev/null

services-cluster-down:
	scripts/services.sh cluster-down

services-sentinel:
	@scripts/services.sh sentinel-up >/dev/null

services-sentinel-down:
	scripts/services.sh sentinel-down

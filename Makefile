# The two commands (see README): `make run` serves on 127.0.0.1:8080, `make test` runs every test.
.PHONY: run test bench services services-down services-status

run:
	scripts/run.sh

test:
	scripts/test.sh

services:
	@scripts/services.sh up >/dev/null

services-down:
	scripts/services.sh down

bench:
	scripts/bench.sh

services-status:
	scripts/services.sh status

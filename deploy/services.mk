# deploy/services.mk — Makefile fragment for the local test services
# (PostgreSQL, Redis, Kafka). The main Makefile does `include deploy/services.mk`.
#   make services-up       install what is missing, start all three
#   make services-down     stop all three
#   make services-status   show what is running
# Then, in a shell:  eval "$(bash deploy/services.sh env)"

SERVICES_SH := $(dir $(lastword $(MAKEFILE_LIST)))services.sh

.PHONY: services-up services-down services-status

services-up:
	bash $(SERVICES_SH) up

services-down:
	bash $(SERVICES_SH) down

services-status:
	bash $(SERVICES_SH) status

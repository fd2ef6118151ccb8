#!/bin/sh
# PostgreSQL of the compose deployment (Debian's postgresql-15): on the first start
# (an empty volume) initdb with the superuser's password from POSTGRES_PASSWORD and
# the database POSTGRES_DB, then serve on every address of the container — the
# compose network is its only reach (nothing is published), and every connection
# over TCP needs the password (scram-sha-256); the Unix socket in the container
# trusts its local users (the healthcheck, `docker exec … psql`).
set -eu
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ]; then
		echo "postgres-entrypoint: POSTGRES_PASSWORD is empty; refusing to make a database anyone on the network can enter" >&2
		exit 1
	fi
	echo "postgres-entrypoint: initdb into $PGDATA (first start)"
	pw="$(mktemp)"
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
	initdb -D "$PGDATA" -U postgres -E UTF8 --locale=C.UTF-8 \
		--auth-local=trust --auth-host=scram-sha-256 --pwfile="$pw" >/dev/null
	rm -f "$pw"
	echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
	if [ -n "${POSTGRES_DB:-}" ] && [ "$POSTGRES_DB" != postgres ]; then
		# Single-user mode: no server listens while the database is made.
		echo "CREATE DATABASE \"$POSTGRES_DB\";" | postgres --single -D "$PGDATA" -j postgres >/dev/null
	fi
fi
# A scaled fleet opens many pools (each worker up to 16 connections,
# docs/reference/configuration.md): Debian's default of 100 is too few for --scale worker=5.
exec postgres -D "$PGDATA" -c listen_addresses='*' \
	-c max_connections="${POSTGRES_MAX_CONNECTIONS:-300}" "$@"

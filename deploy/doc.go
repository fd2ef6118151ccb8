// Package deploy holds the end-to-end test of the compose deployment
// (docker-compose.yml with the images of scripts/deploy-images.sh): the fleet
// started for real with `docker-compose`, runs submitted through the published API,
// a worker killed under load, workers scaled, Prometheus's targets, and `down -v`
// leaving nothing of the fleet on the engine. The package has no code of its own;
// the images it tests are built from deploy/images/.
//
// The test is opt-in (it takes the machine's Docker engine for minutes, needs root
// for the shared workspace mount): AETHERIUM_COMPOSE_TEST=1 runs it, and then
// anything it needs that is missing fails it rather than skipping.
package deploy

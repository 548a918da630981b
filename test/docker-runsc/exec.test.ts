// The docker exec suite (test/docker/exec.test.ts) with every session under gVisor.
import './use-runsc.ts';
import '../docker/exec.test.ts';

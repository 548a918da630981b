// The docker sandbox suite (test/docker/sandbox.test.ts) with every session under gVisor.
import './use-runsc.ts';
import '../docker/sandbox.test.ts';

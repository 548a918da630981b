// The docker session suite (test/docker/session.test.ts) with every session under gVisor.
import './use-runsc.ts';
import '../docker/session.test.ts';

// The egress suite (test/docker/egress.test.ts) with every session under gVisor.
import './use-runsc.ts';
import '../docker/egress.test.ts';

// The docker fs suite (test/docker/fs.test.ts) with every session under gVisor.
import './use-runsc.ts';
import '../docker/fs.test.ts';

/** The console end to end on the docker backend (suite.ts: scenario.ts, scenario-edges.ts). */
import { dockerTestOptions } from '../docker/engine.ts';

// Loaded after the engine check (see usage.test.ts).
const { consoleSuite } = await import('./suite.ts');

consoleSuite('docker', 120_000, dockerTestOptions.skip);

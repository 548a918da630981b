/** The console end to end on the local backend (suite.ts: scenario.ts, scenario-edges.ts). */
import { consoleSuite } from './suite.ts';

consoleSuite('local', 90_000);

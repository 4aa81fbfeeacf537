// The deployment page's Sleep card: every sleep and wake is a recorded decision, so it follows them too.
import { followCard } from "./decision_card.js";

followCard("[data-sleep-box]");

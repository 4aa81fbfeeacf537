// The deployment page's Decisions card, fetched again as the server renders it on each decision.
import { followCard } from "./decision_card.js";

followCard("[data-decisions-box]");

"use strict";
/* aoe-tui cup site: the one script. No network; data comes from <script type="application/json"> blocks,
   text is written with textContent only. Each page kind has its init, chosen by <body data-page>. */

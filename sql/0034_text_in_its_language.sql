-- agent-memory schema, version 34: every text is indexed for full text in its language.
--
-- Until now every fact, message and Store document was parsed as English
-- (to_tsvector('english', ...)): a German or Spanish word was cut by English rules, and a run
-- of Chinese or Japanese characters, which PostgreSQL's parser takes for one word, was one
-- term, so a question matched it only by repeating the whole run. Now one function,
-- agent_memory.search_vector, parses every text that is indexed and every question, by one
-- rule, so a question's words are cut as the texts' are and the kept word counts stay exact:
--
-- * its language: the language whose stop words (PostgreSQL's own Snowball lists, below, of
--   the fifteen languages it ships them for) the text's first 64 words hold most, English
--   first on a tie; with none of them, by its script (Greek, Arabic, Armenian, Tamil,
--   Devanagari as Hindi); else English for plain ASCII and the language-neutral `simple` for
--   anything else. It parses with that language's configuration where the server has one
--   (`simple` otherwise), whose stemmer and stop words are that language's;
-- * Chinese, Japanese and Korean characters: each run of them is indexed as its characters
--   and its overlapping pairs of characters (a question's runs too), so any word of two
--   characters or one is found inside a run without a dictionary of words.
--
-- A text of another language than its neighbours' is parsed by its own rule: memory in two
-- languages is searched in both. A question too short to show its language (no stop word) is
-- parsed as English if ASCII, else by its script: the words it shares with a text are found
-- when both are cut alike, and by meaning otherwise.
--
-- The words columns of the facts, the messages and the Store's documents are made anew with
-- it (PostgreSQL before 17 cannot change a generated column's expression), with their
-- indexes and the triggers that keep the word counts, and the counts are made again.

-- The stop words of each language PostgreSQL ships a list for (its files in
-- share/tsearch_data, most frequent first; tests/test_text_languages.py checks them against
-- the server's): each word with the languages it is a stop word of, as one immutable value.
DO $stop_words$
DECLARE
    stop_words jsonb;
BEGIN
    SELECT jsonb_object_agg(word, languages) INTO stop_words
    FROM (SELECT w.word, jsonb_agg(DISTINCT s.language ORDER BY s.language) AS languages
          FROM (VALUES
    ('danish', 'og i jeg det at en den til er som på de med han af for ikke der var mig sig men et har
        om vi min havde ham hun nu over da fra du ud sin dem os op man hans hvor eller hvad skal
        selv her alle vil blev kunne ind når være dog noget ville jo deres efter ned skulle
        denne end dette mit også under have dig anden hende mine alt meget sit sine vor mod
        disse hvis din nogle hos blive mange ad bliver hendes været thi jer sådan'),
    ('dutch', 'de en van ik te dat die in een hij het niet zijn is was op aan met als voor had er maar
        om hem dan zou of wat mijn men dit zo door over ze zich bij ook tot je mij uit der daar
        haar naar heb hoe heeft hebben deze u want nog zal me zij nu ge geen omdat iets worden
        toch al waren veel meer doen toen moet ben zonder kan hun dus alles onder ja eens hier
        wie werd altijd doch wordt wezen kunnen ons zelf tegen na reeds wil kon niets uw iemand
        geweest andere'),
    ('english', 'i me my myself we our ours ourselves you your yours yourself yourselves he him his
        himself she her hers herself it its itself they them their theirs themselves what which
        who whom this that these those am is are was were be been being have has had having do
        does did doing a an the and but if or because as until while of at by for with about
        against between into through during before after above below to from up down in out on
        off over under again further then once here there when where why how all any both each
        few more most other some such no nor not only own same so than too very s t can will
        just don should now'),
    ('finnish', 'olla olen olet on olemme olette ovat ole oli olisi olisit olisin olisimme olisitte
        olisivat olit olin olimme olitte olivat ollut olleet en et ei emme ette eivät minä minun
        minut minua minussa minusta minuun minulla minulta minulle sinä sinun sinut sinua
        sinussa sinusta sinuun sinulla sinulta sinulle hän hänen hänet häntä hänessä hänestä
        häneen hänellä häneltä hänelle me meidän meidät meitä meissä meistä meihin meillä meiltä
        meille te teidän teidät teitä teissä teistä teihin teillä teiltä teille he heidän heidät
        heitä heissä heistä heihin heillä heiltä heille tämä tämän tätä tässä tästä tähän tallä
        tältä tälle tänä täksi tuo tuon tuotä tuossa tuosta tuohon tuolla tuolta tuolle tuona
        tuoksi se sen sitä siinä siitä siihen sillä siltä sille siksi nämä näiden näitä näissä
        näistä näihin näillä näiltä näille näinä näiksi nuo noiden noita noissa noista noihin
        noilla noilta noille noina noiksi ne niiden niitä niissä niistä niihin niillä niiltä
        niille niinä niiksi kuka kenen kenet ketä kenessä kenestä keneen kenellä keneltä kenelle
        kenenä keneksi ketkä keiden keitä keissä keistä keihin keillä keiltä keille keinä keiksi
        mikä minkä mitä missä mistä mihin millä miltä mille miksi mitkä joka jonka jota jossa
        josta johon jolla jolta jolle jona joksi jotka joiden joita joissa joista joihin joilla
        joilta joille joina joiksi että ja jos koska kuin mutta niin sekä tai vaan vai vaikka
        kanssa mukaan noin poikki yli kun nyt itse'),
    ('french', 'au aux avec ce ces dans de des du elle en et eux il je la le leur lui ma mais me même
        mes moi mon ne nos notre nous on ou par pas pour qu que qui sa se ses son sur ta te tes
        toi ton tu un une vos votre vous c d j l à m n s t y été étée étées étés étant étante
        étants étantes suis es est sommes êtes sont serai seras sera serons serez seront serais
        serait serions seriez seraient étais était étions étiez étaient fus fut fûmes fûtes
        furent sois soit soyons soyez soient fusse fusses fût fussions fussiez fussent ayant
        ayante ayantes ayants eu eue eues eus ai as avons avez ont aurai auras aura aurons aurez
        auront aurais aurait aurions auriez auraient avais avait avions aviez avaient eut eûmes
        eûtes eurent aie aies ait ayons ayez aient eusse eusses eût eussions eussiez eussent'),
    ('german', 'aber alle allem allen aller alles als also am an ander andere anderem anderen anderer
        anderes anderm andern anderr anders auch auf aus bei bin bis bist da damit dann der den
        des dem die das daß derselbe derselben denselben desselben demselben dieselbe dieselben
        dasselbe dazu dein deine deinem deinen deiner deines denn derer dessen dich dir du dies
        diese diesem diesen dieser dieses doch dort durch ein eine einem einen einer eines einig
        einige einigem einigen einiger einiges einmal er ihn ihm es etwas euer eure eurem euren
        eurer eures für gegen gewesen hab habe haben hat hatte hatten hier hin hinter ich mich
        mir ihr ihre ihrem ihren ihrer ihres euch im in indem ins ist jede jedem jeden jeder
        jedes jene jenem jenen jener jenes jetzt kann kein keine keinem keinen keiner keines
        können könnte machen man manche manchem manchen mancher manches mein meine meinem meinen
        meiner meines mit muss musste nach nicht nichts noch nun nur ob oder ohne sehr sein
        seine seinem seinen seiner seines selbst sich sie ihnen sind so solche solchem solchen
        solcher solches soll sollte sondern sonst über um und uns unse unsem unsen unser unses
        unter viel vom von vor während war waren warst was weg weil weiter welche welchem
        welchen welcher welches wenn werde werden wie wieder will wir wird wirst wo wollen
        wollte würde würden zu zum zur zwar zwischen'),
    ('hungarian', 'a ahogy ahol aki akik akkor alatt által általában amely amelyek amelyekben amelyeket
        amelyet amelynek ami amit amolyan amíg amikor át abban ahhoz annak arra arról az azok
        azon azt azzal azért aztán azután azonban bár be belül benne cikk cikkek cikkeket csak
        de e eddig egész egy egyes egyetlen egyéb egyik egyre ekkor el elég ellen elő először
        előtt első én éppen ebben ehhez emilyen ennek erre ez ezt ezek ezen ezzel ezért és fel
        felé hanem hiszen hogy hogyan igen így illetve ill. ill ilyen ilyenkor ison ismét itt jó
        jól jobban kell kellett keresztül keressünk ki kívül között közül legalább lehet
        lehetett legyen lenne lenni lesz lett maga magát majd már más másik meg még mellett mert
        mely melyek mi mit míg miért milyen mikor minden mindent mindenki mindig mint mintha
        mivel most nagy nagyobb nagyon ne néha nekem neki nem néhány nélkül nincs olyan ott
        össze ő ők őket pedig persze rá s saját sem semmi sok sokat sokkal számára szemben
        szerint szinte talán tehát teljes tovább továbbá több úgy ugyanis új újabb újra után
        utána utolsó vagy vagyis valaki valami valamint való vagyok van vannak volt voltam
        voltak voltunk vissza vele viszont volna'),
    ('italian', 'ad al allo ai agli all agl alla alle con col coi da dal dallo dai dagli dall dagl dalla
        dalle di del dello dei degli dell degl della delle in nel nello nei negli nell negl
        nella nelle su sul sullo sui sugli sull sugl sulla sulle per tra contro io tu lui lei
        noi voi loro mio mia miei mie tuo tua tuoi tue suo sua suoi sue nostro nostra nostri
        nostre vostro vostra vostri vostre mi ti ci vi lo la li le gli ne il un uno una ma ed se
        perché anche come dov dove che chi cui non più quale quanto quanti quanta quante quello
        quelli quella quelle questo questi questa queste si tutto tutti a c e i l o ho hai ha
        abbiamo avete hanno abbia abbiate abbiano avrò avrai avrà avremo avrete avranno avrei
        avresti avrebbe avremmo avreste avrebbero avevo avevi aveva avevamo avevate avevano ebbi
        avesti ebbe avemmo aveste ebbero avessi avesse avessimo avessero avendo avuto avuta
        avuti avute sono sei è siamo siete sia siate siano sarò sarai sarà saremo sarete saranno
        sarei saresti sarebbe saremmo sareste sarebbero ero eri era eravamo eravate erano fui
        fosti fu fummo foste furono fossi fosse fossimo fossero essendo faccio fai facciamo
        fanno faccia facciate facciano farò farai farà faremo farete faranno farei faresti
        farebbe faremmo fareste farebbero facevo facevi faceva facevamo facevate facevano feci
        facesti fece facemmo faceste fecero facessi facesse facessimo facessero facendo sto stai
        sta stiamo stanno stia stiate stiano starò starai starà staremo starete staranno starei
        staresti starebbe staremmo stareste starebbero stavo stavi stava stavamo stavate stavano
        stetti stesti stette stemmo steste stettero stessi stesse stessimo stessero stando'),
    ('nepali', 'अक्सर अगाडि अगाडी अझै अनुसार अन्तर्गत अन्य अन्यथा अब अरु अरू अर्का अर्की अर्को अर्थात
        अर्थात् अर्ब अलग अलिकति असार आइतवार आए आज आठ आत्म आदि आफू आफ्नै आफ्नो आयो आश्विन उदाहरण
        उन उप उही एउटै एक एकदम एकै ओठ औं कति कतै कत्रा कत्री कत्रो करोड कस कसरी कसै कस्ता कस्ती
        कस्तो कहिल्यै कहीं का कार्तिक कि किन किनभने कुन कुनै कुरा कृपया के केहि केही को कोही
        क्रमशः खर्ब गयौ चाँडै चार चाले चाहनुहुन्छ चाहन्छु चाहिए चैत चौथो छ छन् छु छू छैन छौँ छौं
        जताततै जति जत्रा जत्री जत्रो जब जबकि जस जस्ता जस्ती जस्तो जस्तोसुकै जहाँ जान जाहिर जुन
        जे जेठ जो जोसुकै ठीक त तत्काल तथा तदनुसार तपाई तपाईं तर तल तापनि तापनी तिन तिनी तिमी तिर
        ती तीन तुरुन्तै तेस्कारण तेस्रो त्यसकारण त्यसपछि त्यसमा त्यसैले त्यहाँ त्यो त्सपछि
        त्सैले थिए थिएन थिएनन् थियो थोरै दस दिए दिनुभएको दिनुहुन्छ दुई देख देखि देखिन्छ देखियो
        देखे देखेको देखेर देख्न दोश्रो दोस्रो धेरै न नजिकै नत्र नयाँ नि निम्ति निम्न निम्नानुसार
        निर्दिष्ट नै नौ पक्का पक्कै पछि पछिल्लो पटक पनि पर्छ पर्थ्यो पर्याप्त पर्सी पहिले पहिलो
        पहिल्यै पाँच पाँचौं पूर्व पौष प्रति प्रतेक प्रत्येक प्रथम प्लस फागुन फेरि फेरी बने बन्द
        बन्न बरु बाटो बारे बाहिर बाहेक बिरुद्ध बिशेष बिहिवार बीच बुधवार भए भदौ भन् भर भित्र
        भित्री भोलि भोली म मंसिर मङ्गलवार महिना मा माघ मात्र माथि मुख्य मेरो यति यत्ति यत्रा
        यत्री यत्रो यथोचित यदि यद्यपि यस यसरी यसो यस्ता यस्ती यस्तो यहाँ या यिन यिनी यी यो र रही
        रहेका रहेको राखे राख्छ राम्रो रूप लगभग लाई लाख लागि ले वरिपरि वरीपरी वर्ष वास्तवमा वाहेक
        विरुद्ध विशेष वैशाख शनिवार शायद शुक्रवार सँग सँगै संग संगै सक्छ सट्टा सधै सधैं सबै समय
        सम्भव सम्म सय सही साँच्चै साउन सात साथ साथै सायद सारा सुन्ना सो सोध्न सोमवार सोही स्पष्ट
        हजार हप्ता हरे हरेक हामी हाम्रो हिजो हुन्छ होला होस्'),
    ('norwegian', 'og i jeg det at en et den til er som på de med han av ikke ikkje der så var meg seg men
        ett har om vi min mitt ha hadde hun nå over da ved fra du ut sin dem oss opp man kan
        hans hvor eller hva skal selv sjøl her alle vil bli ble blei blitt kunne inn når være
        kom noen noe ville dere deres kun ja etter ned skulle denne for deg si sine sitt mot å
        meget hvorfor dette disse uten hvordan ingen din ditt blir samme hvilken hvilke sånn
        inni mellom vår hver hvem vors hvis både bare enn fordi før mange også slik vært båe
        begge siden dykk dykkar dei deira deires deim di då eg ein eit eitt elles honom hjå ho
        hoe henne hennar hennes hoss hossen ingi inkje korleis korso kva kvar kvarhelst kven kvi
        kvifor me medan mi mine mykje no nokon noka nokor noko nokre sia sidan so somt somme um
        upp vere vore verte vort varte vart'),
    ('portuguese', 'de a o que e do da em um para com não uma os no se na por mais as dos como mas ao ele
        das à seu sua ou quando muito nos já eu também só pelo pela até isso ela entre depois
        sem mesmo aos seus quem nas me esse eles você essa num nem suas meu às minha numa pelos
        elas qual nós lhe deles essas esses pelas este dele tu te vocês vos lhes meus minhas teu
        tua teus tuas nosso nossa nossos nossas dela delas esta estes estas aquele aquela
        aqueles aquelas isto aquilo estou está estamos estão estive esteve estivemos estiveram
        estava estávamos estavam estivera estivéramos esteja estejamos estejam estivesse
        estivéssemos estivessem estiver estivermos estiverem hei há havemos hão houve houvemos
        houveram houvera houvéramos haja hajamos hajam houvesse houvéssemos houvessem houver
        houvermos houverem houverei houverá houveremos houverão houveria houveríamos houveriam
        sou somos são era éramos eram fui foi fomos foram fora fôramos seja sejamos sejam fosse
        fôssemos fossem for formos forem serei será seremos serão seria seríamos seriam tenho
        tem temos tém tinha tínhamos tinham tive teve tivemos tiveram tivera tivéramos tenha
        tenhamos tenham tivesse tivéssemos tivessem tiver tivermos tiverem terei terá teremos
        terão teria teríamos teriam'),
    ('russian', 'и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только
        ее мне было вот от меня еще нет о из ему теперь когда даже ну вдруг ли если уже или ни
        быть был него до вас нибудь опять уж вам ведь там потом себя ничего ей может они тут где
        есть надо ней для мы тебя их чем была сам чтоб без будто чего раз тоже себе под будет ж
        тогда кто этот того потому этого какой совсем ним здесь этом один почти мой тем чтобы
        нее сейчас были куда зачем всех никогда можно при наконец два об другой хоть после над
        больше тот через эти нас про всего них какая много разве три эту моя впрочем хорошо свою
        этой перед иногда лучше чуть том нельзя такой им более всегда конечно всю между'),
    ('spanish', 'de la que el en y a los del se las por un para con no una su al lo como más pero sus le
        ya o este sí porque esta entre cuando muy sin sobre también me hasta hay donde quien
        desde todo nos durante todos uno les ni contra otros ese eso ante ellos e esto mí antes
        algunos qué unos yo otro otras otra él tanto esa estos mucho quienes nada muchos cual
        poco ella estar estas algunas algo nosotros mi mis tú te ti tu tus ellas nosotras
        vosostros vosostras os mío mía míos mías tuyo tuya tuyos tuyas suyo suya suyos suyas
        nuestro nuestra nuestros nuestras vuestro vuestra vuestros vuestras esos esas estoy
        estás está estamos estáis están esté estés estemos estéis estén estaré estarás estará
        estaremos estaréis estarán estaría estarías estaríamos estaríais estarían estaba estabas
        estábamos estabais estaban estuve estuviste estuvo estuvimos estuvisteis estuvieron
        estuviera estuvieras estuviéramos estuvierais estuvieran estuviese estuvieses
        estuviésemos estuvieseis estuviesen estando estado estada estados estadas estad he has
        ha hemos habéis han haya hayas hayamos hayáis hayan habré habrás habrá habremos habréis
        habrán habría habrías habríamos habríais habrían había habías habíamos habíais habían
        hube hubiste hubo hubimos hubisteis hubieron hubiera hubieras hubiéramos hubierais
        hubieran hubiese hubieses hubiésemos hubieseis hubiesen habiendo habido habida habidos
        habidas soy eres es somos sois son sea seas seamos seáis sean seré serás será seremos
        seréis serán sería serías seríamos seríais serían era eras éramos erais eran fui fuiste
        fue fuimos fuisteis fueron fuera fueras fuéramos fuerais fueran fuese fueses fuésemos
        fueseis fuesen sintiendo sentido sentida sentidos sentidas siente sentid tengo tienes
        tiene tenemos tenéis tienen tenga tengas tengamos tengáis tengan tendré tendrás tendrá
        tendremos tendréis tendrán tendría tendrías tendríamos tendríais tendrían tenía tenías
        teníamos teníais tenían tuve tuviste tuvo tuvimos tuvisteis tuvieron tuviera tuvieras
        tuviéramos tuvierais tuvieran tuviese tuvieses tuviésemos tuvieseis tuviesen teniendo
        tenido tenida tenidos tenidas tened'),
    ('swedish', 'och det att i en jag hon som han på den med var sig för så till är men ett om hade de av
        icke mig du henne då sin nu har inte hans honom skulle hennes där min man ej vid kunde
        något från ut när efter upp vi dem vara vad över än dig kan sina här ha mot alla under
        någon eller allt mycket sedan ju denna själv detta åt utan varit hur ingen mitt ni bli
        blev oss din dessa några deras blir mina samma vilken er sådan vår blivit dess inom
        mellan sådant varför varje vilka ditt vem vilket sitta sådana vart dina vars vårt våra
        ert era vilkas'),
    ('turkish', 'acaba ama aslında az bazı belki biri birkaç birşey biz bu çok çünkü da daha de defa diye
        eğer en gibi hem hep hepsi her hiç için ile ise kez ki kim mı mu mü nasıl ne neden nerde
        nerede nereye niçin niye o sanki şey siz şu tüm ve veya ya yani')
          ) AS s(language, words)
          CROSS JOIN LATERAL regexp_split_to_table(s.words, '\s+') AS w(word)
          GROUP BY w.word) AS inverted;
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION agent_memory.stop_word_languages() RETURNS jsonb '
        'LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN %L::jsonb', stop_words);
END
$stop_words$;

-- The configuration a text is parsed with, by the rule above: the language's where this
-- server has one (which ones depends on its version), else `simple`. PL/pgSQL, a loop of
-- simple expressions that a session prepares once: a SQL function's query, or a CASE over
-- every configuration, cost several times more a call, and a text is parsed on every
-- single-row write (a Store put, a fact remembered) and every question.
DO $config$
DECLARE
    languages text[];
    scripts text[] := ARRAY['greek', 'arabic', 'armenian', 'tamil', 'hindi'];
    config text[];
    numbered jsonb;
BEGIN
    SELECT array_agg(DISTINCT x.language ORDER BY x.language) INTO languages
    FROM jsonb_each(agent_memory.stop_word_languages()) AS e(word, found),
         jsonb_array_elements_text(e.found) AS x(language);
    -- each language's configuration, or `simple` where the server has none of its name
    SELECT array_agg(coalesce(c.cfgname::text, 'simple') ORDER BY n) INTO config
    FROM unnest(languages || scripts) WITH ORDINALITY AS l(language, n)
    LEFT JOIN pg_ts_config c
        ON c.cfgname = l.language AND c.cfgnamespace = 'pg_catalog'::regnamespace;
    -- the stop words again, each with the numbers of its languages in that list: the rule
    -- counts by number, with no lookup of a name
    SELECT jsonb_object_agg(e.word, (SELECT jsonb_agg(array_position(languages, x.language))
                                     FROM jsonb_array_elements_text(e.found) AS x(language)))
    INTO numbered
    FROM jsonb_each(agent_memory.stop_word_languages()) AS e(word, found);
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION agent_memory.text_config(t text) RETURNS regconfig
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $body$
DECLARE
    configs constant regconfig[] := %L;
    english constant integer := %s;
    counts integer[] := array_fill(0, ARRAY[%s]);
    word text;
    found jsonb;
    at integer;
    best integer := 0;
BEGIN
    FOREACH word IN ARRAY (regexp_split_to_array(
        lower(t), '[[:space:][:punct:]«»‹›„“”‘’‚¡¿…–—·、。，！？：；（）「」『』]+'))[1:64]
    LOOP
        found := %L::jsonb -> word;
        IF found IS NOT NULL THEN
            FOR i IN 0 .. jsonb_array_length(found) - 1 LOOP
                at := (found ->> i)::integer;
                counts[at] := counts[at] + 1;
            END LOOP;
        END IF;
    END LOOP;
    FOR i IN 1 .. cardinality(counts) LOOP
        IF counts[i] > 0 AND (best = 0 OR counts[i] > counts[best]
                              OR (counts[i] = counts[best] AND i = english)) THEN
            best := i;
        END IF;
    END LOOP;
    IF best > 0 THEN
        RETURN configs[best];
    END IF;
    -- no stop word: by the script (the scripts' configurations follow the languages')
    best := cardinality(counts);
    RETURN CASE WHEN t ~ '[\u0370-\u03ff]' THEN configs[best + 1]
                WHEN t ~ '[\u0600-\u06ff]' THEN configs[best + 2]
                WHEN t ~ '[\u0530-\u058f]' THEN configs[best + 3]
                WHEN t ~ '[\u0b80-\u0bff]' THEN configs[best + 4]
                WHEN t ~ '[\u0900-\u097f]' THEN configs[best + 5]
                WHEN t ~ '[^\u0001-\u007f]' THEN 'simple'::regconfig
                ELSE 'english'::regconfig END;
END
$body$
$f$, config, array_position(languages, 'english'), cardinality(languages), numbered);
END
$config$;

-- The name of that configuration (what a test or a person reads).
CREATE OR REPLACE FUNCTION agent_memory.text_language(t text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN agent_memory.text_config(t)::text;

-- A text with its runs of Chinese, Japanese or Korean characters (ideographs, kana, hangul)
-- written out as their characters and their overlapping pairs, each a word of its own: the
-- text with every such character spaced apart, then the runs' pairs from their first
-- character, then from their second.
CREATE OR REPLACE FUNCTION agent_memory.cjk_grams(t text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN regexp_replace(t, '([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff])', ' \1 ', 'g')
    || ' ' || regexp_replace(regexp_replace(t, '[^\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff]+', ' ', 'g'), '([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff])([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff])', ' \1\2 ', 'g')
    || ' ' || regexp_replace(regexp_replace(regexp_replace(t, '[^\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff]+', ' ', 'g'),
                                            '(^| )[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff]', '\1', 'g'),
                             '([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff])([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff])', ' \1\2 ', 'g');

-- The words of a text as memory indexes them and a question is parsed (see above); none of
-- no text.
CREATE OR REPLACE FUNCTION agent_memory.search_vector(t text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN to_tsvector(agent_memory.text_config(t),
                       CASE WHEN t ~ '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff]' THEN agent_memory.cjk_grams(t) ELSE t END);
END
$$;

-- The text of a Store document: its strings, each on a line of its own.
CREATE OR REPLACE FUNCTION agent_memory.document_text(value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (SELECT coalesce(string_agg(j.item #>> '{}', E'\n'), '')
        FROM jsonb_path_query(value, 'strict $.**') AS j(item)
        WHERE jsonb_typeof(j.item) = 'string');

-- The facts' words.
DROP TRIGGER IF EXISTS memory_items_terms_changed ON agent_memory.memory_items;
ALTER TABLE agent_memory.memory_items DROP COLUMN IF EXISTS search;
ALTER TABLE agent_memory.memory_items ADD COLUMN search tsvector
    GENERATED ALWAYS AS (agent_memory.search_vector(content)) STORED;
CREATE INDEX IF NOT EXISTS memory_items_search_idx ON agent_memory.memory_items
    USING gin (search) WITH (fastupdate = off) WHERE superseded_at IS NULL;
CREATE TRIGGER memory_items_terms_changed AFTER UPDATE ON agent_memory.memory_items
    FOR EACH ROW WHEN (OLD.search IS DISTINCT FROM NEW.search
                       OR OLD.scope_key IS DISTINCT FROM NEW.scope_key
                       OR (OLD.superseded_at IS NULL) <> (NEW.superseded_at IS NULL))
    EXECUTE FUNCTION agent_memory.count_changed_fact_terms();

-- The conversation sentences' words, with their speaker's name (sql/0018).
DROP TRIGGER IF EXISTS snippets_terms_changed ON agent_memory.snippets;
ALTER TABLE agent_memory.snippets DROP COLUMN IF EXISTS search;
ALTER TABLE agent_memory.snippets ADD COLUMN search tsvector
    GENERATED ALWAYS AS (agent_memory.search_vector(speaker || ': ' || content)) STORED;
CREATE INDEX IF NOT EXISTS snippets_search_idx ON agent_memory.snippets
    USING gin (search) WITH (fastupdate = off);
CREATE INDEX IF NOT EXISTS snippets_scoped_search_idx ON agent_memory.snippets
    USING gin (agent_memory.scoped_search(scope_key, search)) WITH (fastupdate = off);
CREATE TRIGGER snippets_terms_changed AFTER UPDATE ON agent_memory.snippets
    FOR EACH ROW WHEN (OLD.search IS DISTINCT FROM NEW.search
                       OR OLD.scope_key IS DISTINCT FROM NEW.scope_key)
    EXECUTE FUNCTION agent_memory.count_changed_snippet_terms();

-- The Store documents' words (counted by each search: no kept counts). An item that shows a
-- fact is searched by the fact's words, so it needs none of its own: a put of a memory item
-- parses its text once, for the fact.
ALTER TABLE agent_memory.store_items DROP COLUMN IF EXISTS search;
ALTER TABLE agent_memory.store_items ADD COLUMN search tsvector
    GENERATED ALWAYS AS (CASE WHEN fact_id IS NULL
                              THEN agent_memory.search_vector(agent_memory.document_text(value))
                         END) STORED;

SELECT agent_memory.recount_terms('f');
SELECT agent_memory.recount_terms('s');
